package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
)

// profileArg finds --profile's value before the flags are parsed, since
// the profile supplies the other flags' defaults.
func profileArg(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, p := range []string{"--profile", "-profile"} {
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v
			}
			if a == p && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return "seed"
}

func parseArgs(args []string, stderr io.Writer) (config.Config, outputs, error) {
	name := profileArg(args)
	cfg, err := config.ForProfile(name)
	if err != nil {
		return config.Config{}, outputs{}, err
	}
	var out outputs
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(fs, stderr) }

	fs.String("profile", name, "`name`: seed (the scaling profile: ~35 min), smoke (the same shape in ~1 min), fleet (10,000 idle nodes, then 100 requests/s: ~8 min) sweep (an open-loop rate sweep against a NATS baseline: ~3 min) or burst (9,000 nodes at once on one instance, the Go SDK's then a naive client's: ~3 min), each with its runs in docs/BENCHMARKS.md; sets the defaults below")
	fs.StringVar(&cfg.Switchyard, "switchyard", cfg.Switchyard, "switchyard binary to start (default: go build ./cmd/switchyard into a temporary directory)")
	fs.StringVar(&cfg.RedisURL, "redis-url", cfg.RedisURL, "Redis for the instances started here (each run gets a fresh namespace, removed afterwards)")
	fs.BoolVar(&cfg.RedisCluster, "redis-cluster", cfg.RedisCluster, "instead of --redis-url, start a Redis Cluster of 3 masters (redis-server on free loopback ports, no persistence; removed at exit) and run every instance with --redis-cluster on it")
	fs.StringVar(&cfg.DatabaseURL, "database-url", cfg.DatabaseURL, "PostgreSQL for the instances started here (each run gets a fresh schema, dropped afterwards)")
	fs.Var((*stringList)(&cfg.Targets), "target", "`URL` of a running instance (repeatable): use them instead of starting instances")
	fs.Var((*stringList)(&cfg.APIKeys), "api-key", "with --target: an API `key` for nodes and clients (repeatable; round robin)")
	fs.Var((*stringList)(&cfg.ServeArgs), "serve-arg", "extra `argument` for every `switchyard serve` started here (repeatable), e.g. --serve-arg=--unsafe-no-watcher")
	fs.StringVar(&cfg.LogDir, "log-dir", cfg.LogDir, "directory for the instances' logs (default: a temporary one, kept only when a criterion fails)")

	fs.Var((*intList)(&cfg.Instances), "instances", "instance counts to run and compare, in order (`list`, e.g. 1,2,3); the 1 is the hop baseline")
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "simulated nodes (Go SDK), node i on instance i mod N; each is an open socket here and on its instance, so RLIMIT_NOFILE bounds them")
	fs.IntVar(&cfg.NodesPerProcess, "nodes-per-process", cfg.NodesPerProcess, "fleet profile: the most nodes one process holds (one socket each; RLIMIT_NOFILE bounds a process): the rest run in helper processes of this binary, serving an idle-only task type")
	fs.Float64Var(&cfg.ConnectRate, "connect-rate", cfg.ConnectRate, "nodes connected per second, paced, so that registration is not a thundering herd")
	fs.DurationVar(&cfg.Idle, "idle", cfg.Idle, "fleet profile: the idle window (no requests at all) between the registration and the loaded window")
	fs.Var((*modeList)(&cfg.Modes), "modes", "sweep profile: the modes to run, in order (`list` of nats, floor, local, cross)")
	fs.Var((*rateList)(&cfg.Rates), "rates", "sweep profile: the rates of each mode's steps, rising (`list` of requests/s, e.g. 1000,2500)")
	fs.IntVar(&cfg.NodeConcurrency, "node-concurrency", cfg.NodeConcurrency, "max_concurrency each node declares (the server's default)")
	fs.DurationVar(&cfg.HandlerMin, "handler-min", cfg.HandlerMin, "shortest plain handler sleep")
	fs.DurationVar(&cfg.HandlerMax, "handler-max", cfg.HandlerMax, "longest plain handler sleep (uniform in between)")
	fs.IntVar(&cfg.RampTo, "ramp-to", cfg.RampTo, "concurrent requests reached at the end of the ramp (closed loop)")
	fs.DurationVar(&cfg.Ramp, "ramp", cfg.Ramp, "length of the ramp")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "steady plain requests per second (open loop: sent on schedule whatever the answers)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the steady phase (sweep: of each step's counted window, after its 1 s warm-up; burst: how long the naive client gets)")
	fs.IntVar(&cfg.Streams, "streams", cfg.Streams, "concurrent streaming requests during the steady phase")
	streamSec := fs.Float64("stream-seconds", cfg.StreamLength.Seconds(), "how long each stream's handler streams, in seconds (±10%)")
	fs.IntVar(&cfg.StreamChunks, "stream-chunks", cfg.StreamChunks, "chunks per stream (default 4 per second)")
	fs.IntVar(&cfg.ClientAccounts, "client-accounts", cfg.ClientAccounts, "accounts (API keys) the clients spread over, when starting instances")
	fs.IntVar(&cfg.NodeAccounts, "node-accounts", cfg.NodeAccounts, "accounts the nodes spread over, when starting instances")
	fs.DurationVar(&cfg.TaskTimeout, "task-timeout", cfg.TaskTimeout, "the instances' --task-timeout, and a plain request's deadline")
	fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "a request with no outcome this long past its deadline is LOST")

	fs.StringVar(&cfg.Fault, "fault", cfg.Fault, "`mode`: none, kill (kill -9) or sigterm (drain) one instance mid-run; skipped on 1 instance")
	fs.DurationVar(&cfg.FaultAt, "fault-at", cfg.FaultAt, "when, from the start of the steady phase (default: half of --duration)")
	fs.IntVar(&cfg.FaultInstance, "fault-instance", cfg.FaultInstance, "`number` (1-based) of the instance to hit (default: the one whose nodes run the most tasks for other instances' requests at --fault-at)")
	fs.DurationVar(&cfg.FaultWait, "fault-wait", cfg.FaultWait, "past --fault-at, wait at most this long for a task to be running on the victim's nodes for another instance's request")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "after the fault (a drain: after the exit), left out of the hop and memory figures; fleet profile: the pause between the last node listed and the idle window")
	fs.DurationVar(&cfg.MemMinStretch, "mem-min-stretch", cfg.MemMinStretch, "shortest steady stretch (without a fault) whose memory growth is judged")
	fs.BoolVar(&cfg.NoRehome, "no-rehome", cfg.NoRehome, "leave the lost instance's nodes retrying its address instead of moving them to the others")

	fs.DurationVar(&cfg.Bars.HopP95, "bar-hop-p95", cfg.Bars.HopP95, "bar: overhead the hop may add at p95 vs 1 instance")
	fs.DurationVar(&cfg.Bars.HopP99, "bar-hop-p99", cfg.Bars.HopP99, "bar: overhead the hop may add at p99 vs 1 instance")
	fs.Float64Var(&cfg.Bars.CPUPercent, "bar-cpu", cfg.Bars.CPUPercent, "bar: CPU per instance, % of one core at 100 requests/s")
	fs.Float64Var(&cfg.Bars.MemGrowth, "bar-mem", cfg.Bars.MemGrowth, "bar: RSS growth over the steady phase (fraction)")
	fs.DurationVar(&cfg.Bars.FaultToFail, "bar-fault", cfg.Bars.FaultToFail, "bar: kill → 502 of the killed instance's in-flight tasks")
	fs.Float64Var(&cfg.Bars.IdleCPUPercent, "bar-idle-cpu", cfg.Bars.IdleCPUPercent, "fleet bar: the busiest instance's CPU over the idle window, % of one core")
	fs.Float64Var(&cfg.Bars.IdleRedisOps, "bar-idle-redis", cfg.Bars.IdleRedisOps, "fleet bar: Redis commands/s over the idle window, every server of the Redis together")
	fs.Float64Var(&cfg.Bars.SweepLocal, "bar-sweep-local", cfg.Bars.SweepLocal, "sweep bar: the local mode's p99 at 5000 requests/s, at most this many times the NATS p99 at 5000")
	fs.Float64Var(&cfg.Bars.SweepCross, "bar-sweep-cross", cfg.Bars.SweepCross, "sweep bar: the cross mode's p99 at 2500 requests/s, at most this many times the NATS p99 at 2500")

	fs.StringVar(&out.json, "json", "", "write the JSON report (every request, every sample) to `file`")
	fs.StringVar(&out.html, "html", "", "write the HTML report with its plots to `file`")
	fs.BoolVar(&out.quiet, "quiet", false, "no progress lines on stderr")
	fs.StringVar(&out.cpuProfile, "cpuprofile", "", "write the load test's own CPU profile (its clients and simulated nodes, not the instances: profile those with --serve-arg=--pprof-listen=127.0.0.1:PORT) to `file`")

	instancesSet := false
	if err := fs.Parse(args); err != nil {
		return config.Config{}, out, err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "instances" {
			instancesSet = true
		}
	})
	if fs.NArg() > 0 {
		return config.Config{}, out, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.StreamLength = time.Duration(*streamSec * float64(time.Second))
	if cfg.RedisCluster && flagSet(fs, "redis-url") {
		return config.Config{}, out, errors.New("--redis-cluster starts its own Redis Cluster: leave out --redis-url")
	}
	if len(cfg.Targets) > 0 {
		if !instancesSet && !cfg.Sweep { // the sweep refuses --target (Validate)
			// Against running instances: the first one alone (nodes and
			// clients on it: the baseline), then all of them.
			cfg.Instances = []int{1}
			if len(cfg.Targets) > 1 {
				cfg.Instances = append(cfg.Instances, len(cfg.Targets))
			}
		}
		if !flagSet(fs, "fault") {
			cfg.Fault = config.FaultNone
		}
	}
	return cfg, out, nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// modeList is --modes; setting it replaces the profile's list.
type modeList []string

func (l *modeList) String() string { return strings.Join(*l, ",") }
func (l *modeList) Set(v string) error {
	m, err := config.ParseModes(v)
	if err != nil {
		return err
	}
	*l = m
	return nil
}

// rateList is --rates; setting it replaces the profile's list.
type rateList []float64

func (l *rateList) String() string {
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

func (l *rateList) Set(v string) error {
	r, err := config.ParseRates(v)
	if err != nil {
		return err
	}
	*l = r
	return nil
}

// intList is a comma-separated list of integers; setting it replaces the
// profile's list.
type intList []int

func (l *intList) String() string {
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(v string) error {
	var out []int
	for _, p := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return fmt.Errorf("%q is not a list of integers such as 1,2,3", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}
