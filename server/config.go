package server

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/tasks"
)

// Config is everything an instance is started with. DefaultConfig holds
// every default, and the CLI's flags are bound to it; a zero field takes
// DefaultConfig's value. Validate refuses combinations that cannot work.
type Config struct {
	Listen       string // address of the API and the node sockets
	DataDir      string // where the SQLite store lives (when DatabaseURL is empty)
	DatabaseURL  string // postgres://… selects PostgreSQL instead of SQLite
	InstanceName string // shown in logs and status; empty: the host name
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
	Namespace         string        // the prefix of every Redis key and channel (bus.DefaultNamespace)
	HeartbeatInterval time.Duration // registry, claims and directory refresh
	LivenessTTL       time.Duration // an instance (or claim) not refreshed for this long is gone
	WatchInterval     time.Duration // how often the other side of each task is checked
	// UnsafeNoWatcher turns the owner-liveness watcher off, so tasks of a dead
	// instance wait for their deadline. Only for proving that the load test
	// catches it; never in production.
	UnsafeNoWatcher bool

	OpenRegistration   bool          // POST /api/v1/register creates accounts for anyone
	MaxNodesPerAccount int           // nodes one account may have online at once
	DefaultConcurrency int           // max_concurrency of a node that does not declare one
	TaskTimeout        time.Duration // a plain task's deadline; a stream's longest wait between chunks
	StreamMax          time.Duration // a stream's total limit
	QueueTimeout       time.Duration // how long a request waits for a free node slot
	// TaskRetries is how many times a task whose node failed it before
	// answering runs again on another node, unless the request asks for
	// another number (0–3): 0 takes the default (1), -1 is none.
	TaskRetries     int
	ResultMaxBytes  int64 // bytes: the largest result (all chunks together)
	MaxMessageBytes int64 // bytes: the largest node message
	MaxBodyBytes    int64 // bytes: the largest request body
	// QuarantineAfter is how many tasks in a row, for at least two
	// accounts, must fail on a node, or how many of its usage reports in a
	// row must be implausible, before it is quarantined (-1: never);
	// QuarantineCoolOff is how long it stays so unless resumed.
	QuarantineAfter   int
	QuarantineCoolOff time.Duration
	// MaxInflightPerKey caps one API key's requests running or waiting for
	// a slot at once, cluster-wide (0: no cap); one more is answered 429.
	MaxInflightPerKey int

	// Idempotency-Key (idempotency.go): an answer is kept for replays for
	// IdempotencyTTL (default 24h); a key's claim lapses when its holder
	// has not renewed it for IdempotencyLease (default 5s; renewed every
	// third of it while its task runs), and then its waiters are answered
	// 503 and the key is free; one account holds at most
	// IdempotencyMaxKeys keys at once (default 10,000), each answer at most
	// ResultMaxBytes + 64 KiB.
	IdempotencyTTL     time.Duration
	IdempotencyLease   time.Duration
	IdempotencyMaxKeys int

	// HTTP connections (server/listen.go, docs/SECURITY.md).
	ReadHeaderTimeout time.Duration // the request line and headers must arrive within it
	BodyReadTimeout   time.Duration // a request body must arrive within it, from the end of the headers
	IdleTimeout       time.Duration // an unused keep-alive connection is closed after it
	MaxConnsPerIP     int           // open connections of one client address; -1: no cap (off with TrustProxy)

	// Rates; -1 disables each.
	RequestRate   int // per minute per API key, for /api/v1/request and /api/v1/rate
	PublicRate    int // per minute per client IP, for the public GET endpoints
	RegisterRate  int // per hour per client IP, for POST /api/v1/register
	HandshakeRate int // per minute per client IP, for node connections
	// AuthFailureRate is how many failed authentications (unknown keys,
	// wrong admin tokens) one client IP may make per minute, cluster-wide,
	// before its unknown keys get 429 without a store lookup and every
	// admin token it sends gets 429 (docs/SECURITY.md).
	AuthFailureRate int

	PingInterval time.Duration // server pings to notice dead node sockets
	// RegisterTimeout bounds the wait for a node's first message. Zero is
	// passed through: package nodes fills its own default (10s).
	RegisterTimeout time.Duration
	TrustProxy      bool // take client IPs from X-Forwarded-For (behind a load balancer)

	// The drain (SIGTERM) in steps, each bounded; StopBudget is their sum,
	// the longest a stop can take (57s with the defaults).
	DrainWithdrawTimeout time.Duration // default 2s: withdrawing this instance's nodes from the cluster's directory, first
	DrainTimeout         time.Duration // default 30s: the wait for tasks in flight to finish
	DrainCloseTimeout    time.Duration // default 15s: closing node sockets (1001) and HTTP connections, then deregistering
	DrainFlushTimeout    time.Duration // default 10s: the task-record writer's last flush (and webhook sends settling), before the store closes

	StoreFlushInterval time.Duration // how often task records are written, in batches

	// GCHeapFloorBytes: when the process allocates fast enough that GOGC
	// alone would collect its small heap more than once a second, the
	// collector lets the heap grow by a second's allocation, up to this,
	// before it runs (package gcfloor); otherwise, and above it, GOGC
	// rules. -1: never. Process-wide: the first App of a process to run
	// sets it, until it stops.
	GCHeapFloorBytes int64

	// NoNodeBenchmarks stops sending nodes the benchmark probe after they
	// register (and every 6 h); routing then has no benchmark to go by.
	NoNodeBenchmarks bool
	// SplitTaskTypes are the task types whose long content (over 1,000
	// characters) is cut into 3 parts run on up to 3 nodes and joined.
	// nil takes the default; an empty, non-nil slice turns splitting off.
	SplitTaskTypes []string
	// ModelAliases are model names of the OpenAI routes (/v1/…) that stand
	// for task types, tried in order: the next only when no node serves the
	// one before (ParseModelAliases reads --model-aliases). A model that is
	// no alias routes by its name. nil: none.
	ModelAliases map[string][]string
	// TokenPrices are the spend units a token of each task type costs
	// against a key's budget (switchyard keys set-limits --budget-per-…);
	// a type not listed costs 1 unit a token (ParseTokenPrices reads
	// --token-prices). nil: every type at 1.
	TokenPrices map[string]float64
	// Hedge names the task types whose plain tasks get a second copy on
	// another node when the first has not answered within the type's delay
	// (ParseHedges reads --hedge). nil: none.
	Hedge map[string]time.Duration
	// QuotaCompletionEstimate (default 1024) is the completion tokens a
	// request of a key with token or budget limits holds against them
	// when it names no max_tokens (quota.go): what its answer is expected
	// to cost, until its end replaces the hold with what it did.
	QuotaCompletionEstimate int64
	// BenchmarkMaxAge: a node's benchmark older than this is redone. Zero is
	// passed through: package nodes fills its own default (6h).
	BenchmarkMaxAge time.Duration

	// PprofListen, when set, serves net/http/pprof on its own listener at
	// this address (see pprof.go); empty: no profiling endpoint. It must be
	// a loopback address unless PprofAllowRemote is set.
	PprofListen string
	// PprofAllowRemote lets PprofListen bind a non-loopback address. The
	// endpoint has no authentication: only for a network you trust.
	PprofAllowRemote bool

	// AdminToken, when set, opens the operator-only routes under /admin/api/
	// (admin.go) to requests carrying it as a bearer token: instance ids,
	// host names, addresses and the errors behind an unready instance,
	// which public answers never show; and the dashboard at /dashboard
	// (dashboard.go), which reads them. Empty (the default): no admin
	// routes, no dashboard.
	AdminToken string

	// WebhookAllowPrivate lets webhooks (package webhooks) call targets on
	// loopback, private, link-local and CGNAT addresses, which are refused
	// by default (a request forged from inside the network). Default off.
	WebhookAllowPrivate bool

	Logger *slog.Logger // nil: slog.Default()
}

// DefaultConfig is the one place every default of an instance is written.
// The CLI binds its flags to these values (so --help shows them), and
// withDefaults fills a caller's zero fields from them.
//
// Fields left zero here are passed through to the component that owns them,
// which fills its own default (RegisterTimeout, BenchmarkMaxAge), or are
// resolved when the instance starts (InstanceName: the host name).
func DefaultConfig() Config {
	// What the task engine and the node hub own, they default: taken from
	// them, so each figure is written once.
	t, n := tasks.DefaultConfig(), nodes.DefaultConfig()
	return Config{
		Listen:    ":8800",
		DataDir:   "./data",
		Version:   "dev",
		Namespace: bus.DefaultNamespace,

		HeartbeatInterval: 5 * time.Second,
		LivenessTTL:       15 * time.Second,
		WatchInterval:     t.WatchInterval,

		MaxNodesPerAccount: n.MaxNodesPerAccount,
		DefaultConcurrency: n.DefaultConcurrency,
		TaskTimeout:        t.TaskTimeout,
		StreamMax:          t.StreamMax,
		QueueTimeout:       t.QueueTimeout,
		TaskRetries:        t.TaskRetries,
		ResultMaxBytes:     t.ResultMaxBytes,
		MaxMessageBytes:    n.MaxMessageBytes,
		MaxBodyBytes:       2_000_000,
		QuarantineAfter:    n.QuarantineAfter,
		QuarantineCoolOff:  n.QuarantineCoolOff,

		ReadHeaderTimeout: 10 * time.Second,
		BodyReadTimeout:   30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxConnsPerIP:     256,

		RequestRate:   60,
		PublicRate:    120,
		RegisterRate:  5,
		HandshakeRate: 30,

		AuthFailureRate: 20,

		PingInterval: n.PingInterval,

		DrainWithdrawTimeout: 2 * time.Second,
		DrainTimeout:         30 * time.Second,
		DrainCloseTimeout:    15 * time.Second,
		DrainFlushTimeout:    10 * time.Second,

		StoreFlushInterval: 200 * time.Millisecond,
		GCHeapFloorBytes:   64 << 20,
		SplitTaskTypes:     []string{"translate"},

		QuotaCompletionEstimate: 1024,

		IdempotencyTTL:     24 * time.Hour,
		IdempotencyLease:   5 * time.Second,
		IdempotencyMaxKeys: 10_000,
	}
}

// withDefaults returns c with every zero field taken from DefaultConfig. The
// caller's struct is not changed (c is a copy; SplitTaskTypes is not shared).
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDefault(&c.Listen, d.Listen)
	setDefault(&c.DataDir, d.DataDir)
	if c.InstanceName == "" {
		c.InstanceName, _ = os.Hostname()
		if c.InstanceName == "" {
			c.InstanceName = "switchyard"
		}
	}
	setDefault(&c.Version, d.Version)
	setDefault(&c.Namespace, d.Namespace)
	setDefault(&c.HeartbeatInterval, d.HeartbeatInterval)
	setDefault(&c.LivenessTTL, d.LivenessTTL)
	setDefault(&c.WatchInterval, d.WatchInterval)
	setDefault(&c.MaxNodesPerAccount, d.MaxNodesPerAccount)
	setDefault(&c.DefaultConcurrency, d.DefaultConcurrency)
	setDefault(&c.TaskTimeout, d.TaskTimeout)
	setDefault(&c.StreamMax, d.StreamMax)
	setDefault(&c.QueueTimeout, d.QueueTimeout)
	setDefault(&c.TaskRetries, d.TaskRetries)
	setDefault(&c.ResultMaxBytes, d.ResultMaxBytes)
	setDefault(&c.MaxMessageBytes, d.MaxMessageBytes)
	setDefault(&c.MaxBodyBytes, d.MaxBodyBytes)
	setDefault(&c.QuarantineAfter, d.QuarantineAfter)
	setDefault(&c.QuarantineCoolOff, d.QuarantineCoolOff)
	setDefault(&c.ReadHeaderTimeout, d.ReadHeaderTimeout)
	setDefault(&c.BodyReadTimeout, d.BodyReadTimeout)
	setDefault(&c.IdleTimeout, d.IdleTimeout)
	setDefault(&c.MaxConnsPerIP, d.MaxConnsPerIP)
	setDefault(&c.RequestRate, d.RequestRate)
	setDefault(&c.PublicRate, d.PublicRate)
	setDefault(&c.RegisterRate, d.RegisterRate)
	setDefault(&c.HandshakeRate, d.HandshakeRate)
	setDefault(&c.AuthFailureRate, d.AuthFailureRate)
	setDefault(&c.PingInterval, d.PingInterval)
	setDefault(&c.DrainWithdrawTimeout, d.DrainWithdrawTimeout)
	setDefault(&c.DrainTimeout, d.DrainTimeout)
	setDefault(&c.DrainCloseTimeout, d.DrainCloseTimeout)
	setDefault(&c.DrainFlushTimeout, d.DrainFlushTimeout)
	setDefault(&c.StoreFlushInterval, d.StoreFlushInterval)
	setDefault(&c.GCHeapFloorBytes, d.GCHeapFloorBytes)
	setDefault(&c.QuotaCompletionEstimate, d.QuotaCompletionEstimate)
	setDefault(&c.IdempotencyTTL, d.IdempotencyTTL)
	setDefault(&c.IdempotencyLease, d.IdempotencyLease)
	setDefault(&c.IdempotencyMaxKeys, d.IdempotencyMaxKeys)
	if c.SplitTaskTypes == nil {
		c.SplitTaskTypes = d.SplitTaskTypes
	} else {
		c.SplitTaskTypes = slices.Clone(c.SplitTaskTypes)
	}
	if c.ModelAliases != nil {
		m := make(map[string][]string, len(c.ModelAliases))
		for k, v := range c.ModelAliases {
			m[k] = slices.Clone(v)
		}
		c.ModelAliases = m
	}
	if c.TokenPrices != nil {
		c.TokenPrices = maps.Clone(c.TokenPrices)
	}
	if c.Hedge != nil {
		c.Hedge = maps.Clone(c.Hedge)
	}
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
	// Boot refuses a heartbeat not less than half the TTL: at exactly
	// half, one late refresh already lets the alive key expire.
	if c.HeartbeatInterval <= 0 || 2*c.HeartbeatInterval >= c.LivenessTTL {
		bad("--heartbeat-interval (%s) must be positive and less than half of --liveness-ttl (%s): lower the interval or raise the TTL, or one late refresh lets a live instance be taken for dead", c.HeartbeatInterval, c.LivenessTTL)
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
	if c.TaskRetries < -1 || c.TaskRetries > tasks.MaxTaskRetries {
		bad("--task-retries must be from 0 to %d", tasks.MaxTaskRetries)
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
	if c.MaxInflightPerKey < 0 {
		bad("--max-inflight-per-key must be 0 (no cap) or positive")
	}
	for alias, types := range c.ModelAliases {
		if strings.TrimSpace(alias) != alias || alias == "" || len(types) == 0 || slices.Contains(types, "") {
			bad("--model-aliases: %q must name a model and at least one task type (alias=type1,type2;alias2=type3)", alias)
		}
	}
	for tt, p := range c.TokenPrices {
		if tt == "" || p < 0 || math.IsNaN(p) || math.IsInf(p, 0) {
			bad("--token-prices: %q=%v must name a task type and a price of 0 or more units per token", tt, p)
		}
	}
	for tt, after := range c.Hedge {
		if checkTaskType("--hedge", tt) != nil || after <= 0 || after >= c.TaskTimeout {
			bad("--hedge: %s=%v must name a task type and a delay above 0 and under --task-timeout (%s)", tt, after, c.TaskTimeout)
		}
	}
	if c.QuotaCompletionEstimate < 1 {
		bad("--quota-completion-estimate must be at least 1 token")
	}
	if c.IdempotencyLease < 100*time.Millisecond || c.IdempotencyTTL < time.Minute || c.IdempotencyLease >= c.IdempotencyTTL {
		bad("--idempotency-lease (%s) must be at least 100ms and --idempotency-ttl (%s) at least 1m and longer than the lease", c.IdempotencyLease, c.IdempotencyTTL)
	}
	if c.IdempotencyMaxKeys < 1 {
		bad("--idempotency-max-keys must be at least 1")
	}
	if c.QuarantineAfter < -1 {
		bad("--quarantine-after must be -1 (never) or a positive number of failed tasks")
	}
	if c.QuarantineCoolOff < time.Second {
		bad("--quarantine-cool-off must be at least 1s")
	}
	for name, v := range map[string]int{"--request-rate": c.RequestRate, "--public-rate": c.PublicRate,
		"--register-rate": c.RegisterRate, "--handshake-rate": c.HandshakeRate, "--auth-failure-rate": c.AuthFailureRate} {
		if v < -1 {
			bad("%s must be -1 (off) or a positive number", name)
		}
	}
	if c.PingInterval < 100*time.Millisecond {
		bad("--ping-interval must be at least 100ms")
	}
	for name, v := range map[string]time.Duration{"--drain-withdraw-timeout": c.DrainWithdrawTimeout, "--drain-timeout": c.DrainTimeout,
		"--drain-close-timeout": c.DrainCloseTimeout, "--drain-flush-timeout": c.DrainFlushTimeout} {
		if v < 0 {
			bad("%s must not be negative", name)
		}
	}
	if c.StoreFlushInterval <= 0 {
		bad("--store-flush-interval must be positive")
	}
	if c.GCHeapFloorBytes < -1 {
		bad("--gc-heap-floor-bytes must be -1 (no floor) or a positive number of bytes")
	}
	if c.AdminToken != "" && len(c.AdminToken) < minAdminToken {
		bad("--admin-token must be at least %d characters (a short token can be guessed); e.g. openssl rand -hex 24", minAdminToken)
	}
	if c.PprofListen != "" {
		if p := pprofAddrProblem(c.PprofListen, c.PprofAllowRemote); p != "" {
			bad("%s", p)
		}
	} else if c.PprofAllowRemote {
		bad("--pprof-allow-remote only matters with --pprof-listen")
	}
	return errors.Join(errs...)
}

// StopBudget is the longest a stop (SIGTERM, Ctrl-C) can take: the drain's
// budgets together, DrainWithdrawTimeout + DrainTimeout + DrainCloseTimeout
// + DrainFlushTimeout (57s with the defaults), the steps between them being
// prompt. An orchestrator's grace period (compose's stop_grace_period,
// Kubernetes' terminationGracePeriodSeconds) must be longer, or the
// instance is killed in the middle of its drain.
func (c Config) StopBudget() time.Duration {
	c = c.withDefaults()
	return c.DrainWithdrawTimeout + c.DrainTimeout + c.DrainCloseTimeout + c.DrainFlushTimeout
}

// Multi reports whether the configuration runs in multi-instance mode.
func (c Config) Multi() bool { return c.RedisURL != "" && !c.SingleInstance }

// Mode names the configuration's mode (the modes in docs/OPERATIONS.md) for status and logs.
func (c Config) Mode() string {
	switch {
	case c.Multi():
		return "multi-instance"
	case c.RedisURL != "":
		return "single (Redis lock)"
	}
	return "single"
}

// ParseHedges reads --hedge: "type=delay;type2=delay2", such as
// "chat=2s;embed=300ms" (delays as time.ParseDuration reads them).
func ParseHedges(s string) (map[string]time.Duration, error) {
	var m map[string]time.Duration
	for _, part := range strings.Split(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		tt, after, ok := strings.Cut(part, "=")
		tt = strings.TrimSpace(tt)
		d, err := time.ParseDuration(strings.TrimSpace(after))
		if !ok || tt == "" || err != nil {
			return nil, fmt.Errorf("--hedge: %q is not type=delay (such as chat=2s)", part)
		}
		if _, dup := m[tt]; dup {
			return nil, fmt.Errorf("--hedge: %q is given twice", tt)
		}
		if m == nil {
			m = map[string]time.Duration{}
		}
		m[tt] = d
	}
	return m, nil
}

// ParseModelAliases reads --model-aliases: "alias=type1,type2;alias2=type3",
// each alias a model name of the OpenAI routes and its task types in the
// order they are tried. Spaces around names are dropped; "" is none (nil).
func ParseModelAliases(s string) (map[string][]string, error) {
	var m map[string][]string
	for _, part := range strings.Split(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		alias, list, ok := strings.Cut(part, "=")
		alias = strings.TrimSpace(alias)
		if !ok || alias == "" {
			return nil, fmt.Errorf("--model-aliases: %q is not alias=type1,type2", part)
		}
		var types []string
		for _, t := range strings.Split(list, ",") {
			if t = strings.TrimSpace(t); t != "" {
				types = append(types, t)
			}
		}
		if len(types) == 0 {
			return nil, fmt.Errorf("--model-aliases: %q names no task type", alias)
		}
		if _, dup := m[alias]; dup {
			return nil, fmt.Errorf("--model-aliases: %q is given twice", alias)
		}
		if m == nil {
			m = map[string][]string{}
		}
		m[alias] = types
	}
	return m, nil
}

// ParseTokenPrices reads --token-prices: "chat=2,embedding=0.1", the spend
// units a token of each task type costs; "" is none (nil: every type at 1).
func ParseTokenPrices(s string) (map[string]float64, error) {
	var m map[string]float64
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		tt, price, ok := strings.Cut(part, "=")
		tt = strings.TrimSpace(tt)
		p, err := strconv.ParseFloat(strings.TrimSpace(price), 64)
		if !ok || tt == "" || err != nil || p < 0 || math.IsInf(p, 0) || math.IsNaN(p) {
			return nil, fmt.Errorf("--token-prices: %q is not task_type=units per token (0 or more)", part)
		}
		if _, dup := m[tt]; dup {
			return nil, fmt.Errorf("--token-prices: %q is priced twice", tt)
		}
		if m == nil {
			m = map[string]float64{}
		}
		m[tt] = p
	}
	return m, nil
}
