package server

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Config is everything an instance is started with. Zero values take the
// defaults shown; Validate refuses combinations that cannot work.
type Config struct {
	Listen       string // default ":8800"
	DataDir      string // default "./data"; where the SQLite store lives
	DatabaseURL  string // postgres://… selects PostgreSQL instead of SQLite
	InstanceName string // default the host name; shown in logs and status
	Version      string // reported by /api/v1/status

	// RedisURL (redis://host:6379/0) turns on shared state: a Redis bus,
	// registry, fenced node claims, directory and rate limits. Several
	// instances then act as one (multi-instance mode, which needs
	// PostgreSQL), unless SingleInstance is set.
	RedisURL string
	// RedisCluster reads RedisURL as a Redis Cluster URL (redis://h1:6379?addr=h2:6379…).
	RedisCluster bool
	// SingleInstance, with RedisURL, runs one instance that keeps its bus in
	// process, takes the Redis lock and refuses to start while another
	// instance holds it (the rollback switch of multi-instance mode).
	SingleInstance    bool
	Namespace         string        // default "sy": the prefix of every Redis key and channel
	HeartbeatInterval time.Duration // default 5s: registry, claims and directory refresh
	LivenessTTL       time.Duration // default 15s: an instance (or claim) not refreshed for this long is gone
	WatchInterval     time.Duration // default 250ms: how often the other side of each task is checked
	// UnsafeNoWatcher turns the owner-liveness watcher off, so tasks of a dead
	// instance wait for their deadline. Only for proving that the load test
	// catches it; never in production.
	UnsafeNoWatcher bool

	OpenRegistration   bool          // POST /api/v1/register creates accounts for anyone
	MaxNodesPerAccount int           // default 5
	DefaultConcurrency int           // default 4: max_concurrency of a node that does not declare one
	TaskTimeout        time.Duration // default 60s (a stream: between chunks)
	StreamMax          time.Duration // default 600s: a stream's total limit
	QueueTimeout       time.Duration // default 10s: how long a request waits for a free node slot
	ResultMaxBytes     int64         // default 1 MiB
	MaxMessageBytes    int64         // default 4 MiB: the largest node message
	MaxBodyBytes       int64         // default 2,000,000: the largest request body

	RequestRate   int // default 60 per minute per API key, for /api/v1/request and /api/v1/rate; -1 disables
	PublicRate    int // default 120 per minute per client IP, for the public GET endpoints; -1 disables
	RegisterRate  int // default 5 per hour per client IP; -1 disables
	HandshakeRate int // default 30 per minute per client IP, for node connections; -1 disables

	PingInterval    time.Duration // default 20s: server pings to notice dead node sockets
	RegisterTimeout time.Duration // default 10s: a node's first message must arrive within it
	DrainTimeout    time.Duration // default 30s: how long SIGTERM waits for tasks in flight
	TrustProxy      bool          // take client IPs from X-Forwarded-For (behind a load balancer)

	StoreFlushInterval time.Duration // default 200ms: how often task records are written

	// NoNodeBenchmarks stops sending nodes the benchmark probe after they
	// register (and every 6 h); routing then has no benchmark to go by.
	NoNodeBenchmarks bool
	// SplitTaskTypes are the task types whose long content (over 1,000
	// characters) is cut into 3 parts run on up to 3 nodes and joined.
	// nil means ["translate"]; an empty, non-nil slice turns splitting off.
	SplitTaskTypes  []string
	BenchmarkMaxAge time.Duration // default 6h: a node's benchmark older than this is redone

	Logger *slog.Logger // default slog.Default()
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = ":8800"
	}
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	if c.InstanceName == "" {
		c.InstanceName, _ = os.Hostname()
		if c.InstanceName == "" {
			c.InstanceName = "switchyard"
		}
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Namespace == "" {
		c.Namespace = "sy"
	}
	if c.SplitTaskTypes == nil {
		c.SplitTaskTypes = []string{"translate"}
	}
	setDefault(&c.HeartbeatInterval, 5*time.Second)
	setDefault(&c.LivenessTTL, 15*time.Second)
	setDefault(&c.WatchInterval, 250*time.Millisecond)
	setDefault(&c.MaxNodesPerAccount, 5)
	setDefault(&c.DefaultConcurrency, 4)
	setDefault(&c.TaskTimeout, 60*time.Second)
	setDefault(&c.StreamMax, 600*time.Second)
	setDefault(&c.QueueTimeout, 10*time.Second)
	setDefault(&c.ResultMaxBytes, 1<<20)
	setDefault(&c.MaxMessageBytes, 4<<20)
	setDefault(&c.MaxBodyBytes, 2_000_000)
	setDefault(&c.RequestRate, 60)
	setDefault(&c.PublicRate, 120)
	setDefault(&c.RegisterRate, 5)
	setDefault(&c.HandshakeRate, 30)
	setDefault(&c.PingInterval, 20*time.Second)
	setDefault(&c.DrainTimeout, 30*time.Second)
	setDefault(&c.StoreFlushInterval, 200*time.Millisecond)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate checks a configuration (after defaults) and says, in one
// sentence per problem, what to change.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.InstanceName == "" {
		bad("--instance-name must not be empty")
	}
	if strings.Contains(c.InstanceName, ":") {
		bad("--instance-name %q must not contain ':' (it is part of Redis values)", c.InstanceName)
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		bad("--database-url must be a postgres:// URL (leave it empty to use SQLite in --data-dir)")
	}
	if c.RedisURL != "" && !strings.HasPrefix(c.RedisURL, "redis://") && !strings.HasPrefix(c.RedisURL, "rediss://") {
		bad("--redis-url must be a redis:// or rediss:// URL")
	}
	if c.RedisURL == "" && c.SingleInstance {
		bad("--multi-instance=false only matters with --redis-url (without Redis an instance is always single)")
	}
	if c.Multi() && c.DatabaseURL == "" {
		bad("multi-instance mode (the default with --redis-url) needs --database-url (PostgreSQL): with SQLite each instance would keep its own history; to run one instance with Redis, add --multi-instance=false")
	}
	if strings.ContainsAny(c.Namespace, " {}:") {
		bad("--namespace %q must not contain spaces, braces or ':'", c.Namespace)
	}
	if c.HeartbeatInterval <= 0 || 2*c.HeartbeatInterval > c.LivenessTTL {
		bad("--heartbeat-interval (%s) must be positive and at most half of --liveness-ttl (%s), or a live instance could be taken for dead", c.HeartbeatInterval, c.LivenessTTL)
	}
	if c.WatchInterval <= 0 {
		bad("--watch-interval must be positive")
	}
	if c.MaxNodesPerAccount < 1 {
		bad("--max-nodes-per-account must be at least 1")
	}
	if c.DefaultConcurrency < 1 || c.DefaultConcurrency > 1024 {
		bad("--default-max-concurrency must be from 1 to 1024")
	}
	if c.TaskTimeout <= 0 || c.StreamMax <= 0 {
		bad("--task-timeout and --stream-max must be positive")
	} else if c.StreamMax < c.TaskTimeout {
		bad("--stream-max (%s) must not be shorter than --task-timeout (%s)", c.StreamMax, c.TaskTimeout)
	}
	if c.QueueTimeout < 0 {
		bad("--queue-timeout must not be negative")
	}
	if c.ResultMaxBytes < 1 {
		bad("--result-max-bytes must be positive")
	}
	if c.MaxMessageBytes < c.ResultMaxBytes {
		bad("--max-message-bytes (%d) must be at least --result-max-bytes (%d), or a result at the cap could not arrive", c.MaxMessageBytes, c.ResultMaxBytes)
	}
	if c.MaxBodyBytes < 1 {
		bad("--max-body-bytes must be positive")
	}
	for name, v := range map[string]int{"--request-rate": c.RequestRate, "--public-rate": c.PublicRate,
		"--register-rate": c.RegisterRate, "--handshake-rate": c.HandshakeRate} {
		if v < -1 {
			bad("%s must be -1 (off) or a positive number", name)
		}
	}
	if c.PingInterval < 100*time.Millisecond {
		bad("--ping-interval must be at least 100ms")
	}
	if c.DrainTimeout < 0 {
		bad("--drain-timeout must not be negative")
	}
	if c.StoreFlushInterval <= 0 {
		bad("--store-flush-interval must be positive")
	}
	return errors.Join(errs...)
}

// Multi reports whether the configuration runs in multi-instance mode.
func (c Config) Multi() bool { return c.RedisURL != "" && !c.SingleInstance }

// Mode names the configuration's mode (DESIGN §3) for status and logs.
func (c Config) Mode() string {
	switch {
	case c.Multi():
		return "multi-instance"
	case c.RedisURL != "":
		return "single (Redis lock)"
	}
	return "single"
}
