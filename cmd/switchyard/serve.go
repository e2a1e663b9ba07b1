package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/switchyard-dev/switchyard/server"
	"github.com/switchyard-dev/switchyard/tasks"
)

// logFlags are the logging flags every long-running command shares.
type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(fs *flagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", l.format)
}

// storeFlags select the store; serve and the admin commands share them.
type storeFlags struct {
	dataDir     string
	databaseURL string
}

func (s *storeFlags) register(fs *flagSet) {
	fs.StringVar(&s.dataDir, "data-dir", server.DefaultConfig().DataDir, "directory of the embedded SQLite store (used when --database-url is empty)")
	fs.StringVar(&s.databaseURL, "database-url", "", "PostgreSQL URL (postgres://user:pass@host:5432/db); empty keeps SQLite in --data-dir")
}

// localURL is scheme://127.0.0.1:PORT/path, PORT being the default --listen
// port: what status and node reach when nothing else is said.
func localURL(scheme, path string) string {
	_, port, err := net.SplitHostPort(server.DefaultConfig().Listen)
	if err != nil {
		panic("server.DefaultConfig().Listen is not HOST:PORT: " + err.Error())
	}
	return scheme + "://" + net.JoinHostPort("127.0.0.1", port) + path
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := serveConfig(args, stderr)
	if err != nil {
		return err
	}
	app, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	// The orchestrator's grace period must be longer (docs/OPERATIONS.md).
	cfg.Logger.Info("a stop (SIGTERM) drains within the stop budget; give the instance a longer grace period",
		"stop_budget", cfg.StopBudget())
	return app.Run(ctx)
}

// serveConfig turns serve's flags (and their environment variables) into a
// server.Config. It opens nothing; server.New validates the result.
func serveConfig(args []string, stderr io.Writer) (server.Config, error) {
	// Every flag's default is the field's value in server.DefaultConfig, the
	// one place defaults are written: the flag writes over it when given.
	cfg := server.DefaultConfig()
	fs := newFlagSet("serve", fmt.Sprintf(`Runs a switchyard instance. With nothing set it listens on %s, keeps its
data in SQLite under %s, and needs nothing else. Nodes connect to
ws://HOST:PORT/ws/node; clients call http://HOST:PORT/api/v1/…`, cfg.Listen, cfg.DataDir), stderr)
	var lf logFlags
	var sf storeFlags
	sf.register(fs)
	lf.register(fs)
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to listen on for the API and node sockets")
	fs.StringVar(&cfg.InstanceName, "instance-name", cfg.InstanceName, "human name of this instance in logs and status (default: the host name)")
	fs.StringVar(&cfg.RedisURL, "redis-url", cfg.RedisURL, "Redis URL (redis://host:6379/0): share state with other instances (multi-instance mode, which needs --database-url)")
	fs.BoolVar(&cfg.RedisCluster, "redis-cluster", cfg.RedisCluster, "read --redis-url as a Redis Cluster URL (redis://h1:6379?addr=h2:6379&addr=h3:6379); the bus then uses sharded pub/sub (Redis 7)")
	multi := fs.Bool("multi-instance", !cfg.SingleInstance, "with --redis-url, act as one service with the other instances; false runs this one alone, holding a Redis lock (the rollback switch)")
	fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "prefix of every Redis key and channel; instances with the same Redis and namespace form one cluster")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", cfg.HeartbeatInterval, "how often an instance refreshes its registration and directory, once per instance (less than half of --liveness-ttl)")
	fs.DurationVar(&cfg.LivenessTTL, "liveness-ttl", cfg.LivenessTTL, "an instance not refreshed for this long is gone; its node claims and directory are then purged (more than twice --heartbeat-interval)")
	fs.BoolVar(&cfg.UnsafeNoWatcher, "unsafe-no-watcher", cfg.UnsafeNoWatcher, "TESTING ONLY: turn off the owner-liveness watcher (tasks of a dead instance then wait for their deadline); the load test's self-check uses it")
	fs.DurationVar(&cfg.WatchInterval, "watch-interval", cfg.WatchInterval, "how often the instance on the other side of each task is checked (a dead one fails its tasks after two checks)")
	fs.BoolVar(&cfg.OpenRegistration, "open-registration", cfg.OpenRegistration, "let anyone create an account with POST /api/v1/register")
	fs.IntVar(&cfg.MaxNodesPerAccount, "max-nodes-per-account", cfg.MaxNodesPerAccount, "nodes one account may have online at once")
	fs.IntVar(&cfg.DefaultConcurrency, "default-max-concurrency", cfg.DefaultConcurrency, "tasks at once for a node that does not declare max_concurrency")
	fs.DurationVar(&cfg.TaskTimeout, "task-timeout", cfg.TaskTimeout, "deadline of a plain task; for a stream, the longest wait between chunks")
	fs.DurationVar(&cfg.StreamMax, "stream-max", cfg.StreamMax, "longest a streaming task may run in total")
	fs.DurationVar(&cfg.QueueTimeout, "queue-timeout", cfg.QueueTimeout, "how long a request waits for a free slot when every capable node is busy (then 503 nodes_busy)")
	fs.IntVar(&cfg.TaskRetries, "task-retries", cfg.TaskRetries, "how many times a task whose node fails it before answering (its socket closes, its heartbeat lapses, its instance dies, or it answers \"unavailable\") runs again on another node, within the task's time; a request may ask for 0-3 (body \"retries\", header X-Task-Retries); 0: never")
	fs.Int64Var(&cfg.ResultMaxBytes, "result-max-bytes", cfg.ResultMaxBytes, "largest result a node may return (over all chunks, and for the final result)")
	fs.Int64Var(&cfg.MaxMessageBytes, "max-message-bytes", cfg.MaxMessageBytes, "largest message a node may send; a larger one closes its socket with 1009")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", cfg.MaxBodyBytes, "largest request body; a larger one is refused with 413")
	fs.IntVar(&cfg.MaxInflightPerKey, "max-inflight-per-key", cfg.MaxInflightPerKey, "requests one API key may have running or waiting for a node at once, cluster-wide; one more gets 429 too_many_in_flight (0: no cap)")
	fs.DurationVar(&cfg.IdempotencyTTL, "idempotency-ttl", cfg.IdempotencyTTL, "how long the answer to a request with an Idempotency-Key is kept for its repeats (and the key counts against --idempotency-max-keys)")
	fs.DurationVar(&cfg.IdempotencyLease, "idempotency-lease", cfg.IdempotencyLease, "an Idempotency-Key's claim lapses this long after its instance stops renewing it (it died): its waiting repeats get 503 idempotency_key_released and the key is free")
	fs.IntVar(&cfg.IdempotencyMaxKeys, "idempotency-max-keys", cfg.IdempotencyMaxKeys, "Idempotency-Keys one account may hold at once (within --idempotency-ttl); one more gets 429 idempotency_keys_exhausted")
	fs.IntVar(&cfg.QuarantineAfter, "quarantine-after", cfg.QuarantineAfter, "quarantine a node (no new tasks) once this many tasks in a row, for at least two accounts, failed on it (it answered failed, sent an invalid result or timed out), or this many of its usage reports in a row claimed far more tokens than it handled; -1: never")
	fs.DurationVar(&cfg.QuarantineCoolOff, "quarantine-cool-off", cfg.QuarantineCoolOff, "how long a quarantined node stays out of service before it serves again (an operator's resume ends it sooner)")
	fs.IntVar(&cfg.RequestRate, "request-rate", cfg.RequestRate, "requests per minute per API key on /api/v1/request and /api/v1/rate (-1: no limit)")
	fs.IntVar(&cfg.PublicRate, "public-rate", cfg.PublicRate, "requests per minute per client IP on the public endpoints (-1: no limit)")
	fs.IntVar(&cfg.RegisterRate, "register-rate", cfg.RegisterRate, "sign-ups per hour per client IP with --open-registration (-1: no limit)")
	fs.IntVar(&cfg.HandshakeRate, "handshake-rate", cfg.HandshakeRate, "node connections per minute per client IP (-1: no limit)")
	fs.IntVar(&cfg.AuthFailureRate, "auth-failure-rate", cfg.AuthFailureRate, "failed authentications (unknown API keys, wrong admin tokens) per minute per client IP, cluster-wide; past it that address's unknown keys get 429 without a database lookup, and every admin token it sends gets 429 (-1: no limit)")
	fs.DurationVar(&cfg.PingInterval, "ping-interval", cfg.PingInterval, "ping a node socket silent this long (no message, ping or pong from the node), to notice dead ones")
	fs.DurationVar(&cfg.DrainWithdrawTimeout, "drain-withdraw-timeout", cfg.DrainWithdrawTimeout, "on SIGTERM, first, how long withdrawing this instance's nodes from the cluster's directory may take")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "on SIGTERM, how long to let tasks in flight finish")
	fs.DurationVar(&cfg.DrainCloseTimeout, "drain-close-timeout", cfg.DrainCloseTimeout, "on SIGTERM, after the tasks, how long closing node sockets and HTTP connections and deregistering may take")
	fs.DurationVar(&cfg.DrainFlushTimeout, "drain-flush-timeout", cfg.DrainFlushTimeout, "on SIGTERM, last, how long writing the buffered task records may take; the four drain budgets together are the stop budget, logged at start: set the orchestrator's grace period above it")
	fs.DurationVar(&cfg.ReadHeaderTimeout, "read-header-timeout", cfg.ReadHeaderTimeout, "a request's line and headers must arrive within this")
	fs.DurationVar(&cfg.BodyReadTimeout, "body-read-timeout", cfg.BodyReadTimeout, "a request's body must arrive within this, from the end of its headers (a client that trickles a body is cut off)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "close keep-alive connections unused for this long")
	fs.IntVar(&cfg.MaxConnsPerIP, "max-conns-per-ip", cfg.MaxConnsPerIP, "open connections (HTTP, streams and node sockets) one client address may hold; more are closed at once (-1: no cap; off with --trust-proxy)")
	fs.BoolVar(&cfg.TrustProxy, "trust-proxy", cfg.TrustProxy, "take client IPs from X-Forwarded-For (only behind a proxy you run)")
	split := fs.String("split-task-types", strings.Join(cfg.SplitTaskTypes, ","), "task types whose content over 1,000 characters is cut into 3 parts run on up to 3 nodes and joined (comma-separated; \"none\" turns it off)")
	aliases := fs.String("model-aliases", "", "model names of the OpenAI routes (/v1/...) that stand for task types tried in order, the next only when no node serves the one before: \"fast=llama-8b,llama-70b;smart=llama-70b\"")
	hedge := fs.String("hedge", "", "task types whose plain tasks get a second copy on another node with a free slot when the first has not answered within the delay (the type's p95, say): \"chat=2s;embed=300ms\"; the first answer wins and the other copy is cancelled")
	prices := fs.String("token-prices", "", "spend units a token of each task type costs against a key's budget (switchyard keys set-limits --budget-per-day/--budget-per-month): \"chat=2,embedding=0.1\"; a type not listed costs 1")
	fs.Int64Var(&cfg.QuotaCompletionEstimate, "quota-completion-estimate", cfg.QuotaCompletionEstimate, "completion tokens a request of a key with token or budget limits (keys set-limits) holds against them while it runs when it names no max_tokens; its end replaces the hold with what it used")
	benchmarks := fs.Bool("node-benchmarks", !cfg.NoNodeBenchmarks, "send nodes a short benchmark after they register (and every 6 h); routing prefers nodes that answer it fast")
	fs.DurationVar(&cfg.StoreFlushInterval, "store-flush-interval", cfg.StoreFlushInterval, "how often finished tasks are written to the database, in batches")
	fs.Int64Var(&cfg.GCHeapFloorBytes, "gc-heap-floor-bytes", cfg.GCHeapFloorBytes, "when the instance allocates fast enough to collect more than once a second, let the heap grow by up to a second's allocation, to at most this, before Go's garbage collector runs (a small heap is otherwise collected many times a second under load, most of the tail latency); otherwise, and above it, GOGC rules (-1: never)")
	fs.StringVar(&cfg.AdminToken, "admin-token", cfg.AdminToken, "open the operator-only routes (/admin/api/...) and the dashboard (/dashboard) to this bearer token (16 characters or more); empty: neither. Prefer SWITCHYARD_ADMIN_TOKEN: a flag shows in ps")
	fs.StringVar(&cfg.PprofListen, "pprof-listen", cfg.PprofListen, "serve net/http/pprof (/debug/pprof/) on this address, apart from the API; empty: off. Loopback only (127.0.0.1:6060) unless --pprof-allow-remote")
	fs.BoolVar(&cfg.PprofAllowRemote, "pprof-allow-remote", cfg.PprofAllowRemote, "let --pprof-listen bind a non-loopback address (the endpoint has no authentication: only on a network you trust)")
	fs.BoolVar(&cfg.WebhookAllowPrivate, "webhook-allow-private", cfg.WebhookAllowPrivate, "let webhooks call loopback, private (RFC 1918, fc00::/7), link-local and CGNAT addresses, refused by default (only where every such address is yours to call)")
	if err := fs.parse(args); err != nil {
		return server.Config{}, err
	}
	if fs.NArg() > 0 {
		return server.Config{}, fmt.Errorf("serve takes no arguments, got %q (see switchyard serve --help)", fs.Args())
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return server.Config{}, err
	}
	cfg.DataDir, cfg.DatabaseURL, cfg.Logger, cfg.Version = sf.dataDir, sf.databaseURL, log, version
	// Validate (in server.New) refuses --multi-instance=false without Redis.
	cfg.SingleInstance = !*multi
	switch {
	case cfg.TaskRetries == 0:
		cfg.TaskRetries = -1 // the flag's 0 is none; server.Config's is the default
	case cfg.TaskRetries < 0:
		return server.Config{}, fmt.Errorf("--task-retries must be from 0 to %d", tasks.MaxTaskRetries)
	}
	cfg.NoNodeBenchmarks = !*benchmarks
	if cfg.ModelAliases, err = server.ParseModelAliases(*aliases); err != nil {
		return server.Config{}, err
	}
	if cfg.TokenPrices, err = server.ParseTokenPrices(*prices); err != nil {
		return server.Config{}, err
	}
	if cfg.Hedge, err = server.ParseHedges(*hedge); err != nil {
		return server.Config{}, err
	}
	cfg.SplitTaskTypes = []string{} // non-nil: empty turns splitting off
	if *split != "none" {
		var l stringList
		_ = l.Set(*split)
		cfg.SplitTaskTypes = append(cfg.SplitTaskTypes, l...)
	}
	return cfg, nil
}
