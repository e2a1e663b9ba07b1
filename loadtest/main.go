package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/fleet"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/sweep"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitPass  = 0 // every criterion held
	exitFail  = 1 // a criterion failed
	exitError = 2 // the run could not be carried out, or bad usage
)

// outputs are where the report goes besides stdout.
type outputs struct {
	json, html string
	quiet      bool
	cpuProfile string // the load test's own CPU profile (its clients and nodes)
}

func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == fleet.HelperArg { // a helper process of the fleet profile
		if err := fleet.RunHelper(args[1], os.Stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return exitError
		}
		return exitPass
	}
	if len(args) == 1 && args[0] == sweep.FloorServerArg { // the sweep's floor mode (sweepfloor.go)
		if err := sweep.RunFloorServer(os.Stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return exitError
		}
		return exitPass
	}
	cfg, out, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitPass
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return exitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if out.cpuProfile != "" {
		f, err := os.Create(out.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "loadtest: --cpuprofile:", err)
			return exitError
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	var progress io.Writer = stderr
	if out.quiet {
		progress = nil
	}
	rep, err := Run(ctx, cfg, progress)
	if rep != nil && (len(rep.Runs) > 0 || rep.Sweep != nil) {
		if werr := writeOutputs(rep, out, stdout); werr != nil {
			fmt.Fprintln(stderr, "loadtest:", werr)
			return exitError
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return exitError
	}
	if rep.LogDir != "" {
		fmt.Fprintf(stdout, "instance logs: %s\n", rep.LogDir)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "loadtest: interrupted")
		return exitError
	}
	if !rep.Pass {
		return exitFail
	}
	return exitPass
}

func writeOutputs(rep *report.Report, out outputs, stdout io.Writer) error {
	rep.WriteText(stdout)
	write := func(path string, f func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			_ = fh.Close()
			return err
		}
		return fh.Close()
	}
	if err := write(out.json, rep.WriteJSON); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	if err := write(out.html, rep.WriteHTML); err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return nil
}

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

	fs.String("profile", name, "`name`: seed (seed 002 §4.1: ~35 min), smoke (the same shape in ~1 min), fleet (10,000 idle nodes, then 100 requests/s: ~8 min) or sweep (issue 13's open-loop rate sweep against a NATS baseline: ~3 min); sets the defaults below")
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
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the steady phase (sweep: of each step's counted window, after its 1 s warm-up)")
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
		if !instancesSet {
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

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, `Usage: loadtest [--profile seed|smoke|fleet|sweep] [flags]

Replays switchyard's scaling profile (seed 002 §4.1) and judges it against
DESIGN §8. For each instance count in --instances (1, then 2, then 3) it
starts that many instances of the switchyard binary on free loopback ports,
sharing --redis-url (a fresh namespace) and --database-url (a fresh schema),
or, with --target, uses the first N of the given running instances. With
--redis-cluster it first starts a Redis Cluster of its own (3 masters:
redis-server processes on free loopback ports below 50000, no persistence,
stopped and removed at exit, also on Ctrl-C) and runs every instance with
--redis-cluster on it. Then:

  nodes    --nodes simulated nodes (the Go SDK), node i on instance i mod N,
           connecting --connect-rate a second; handlers sleep
           --handler-min..--handler-max (sdk/handlers.Sleep) and report that
           as processing_time_ms
  ramp     closed-loop clients grow to --ramp-to concurrent requests over --ramp
  steady   --rate plain requests/s for --duration, open loop, round robin over
           the instances and over several API keys, with --streams concurrent
           streams of --stream-seconds alongside
  fault    at --fault-at, kill -9 (--fault kill) or SIGTERM (--fault sigterm)
           one instance; the clients stop sending to it (as a load balancer
           would) and its nodes reconnect to the others

The fleet profile (DESIGN §8 at fleet scale) has another shape: once every
node has registered and every instance lists them all, and --settle has
passed, an idle window of --idle with no requests at all, then a loaded
window of --rate short plain requests/s for --duration (the steady phase;
no ramp, streams or fault unless asked, and never a fault). For each window
it reports every instance's CPU (% of one core: its CPU time over the
window from /proc, divided by the window's length) and RSS, the busiest
instance, the load test's own CPU, and Redis commands/s (INFO stats
total_commands_processed, end minus start, summed over every server: the
single Redis, or every master and replica of the cluster). A Redis this
program did not start (the default 127.0.0.1:6379) may carry other clients'
traffic: it is counted too, and the report says so.

The sweep profile (issue 13) measures switchyard against an embedded NATS
baseline. Its --modes run one after another, each with --nodes echo
workers that answer with the request's content at once:
  nats     an embedded nats-server (random loopback port, no logging);
           the workers are queue-group subscribers, each on its own
           connection; every request goes out on one shared client
           connection (nc.RequestWithContext)
  floor    the same SDK client and echo nodes as local, through a bare
           forwarder in a process of this binary (HTTP/1.1 in, one
           WebSocket round trip to a node with a free slot, JSON; no
           accounts, limits, records, metrics or cluster): what any
           coordinator of this protocol costs on this machine, so what
           local adds over it is switchyard's own
  local    one instance; SDK echo nodes (--node-concurrency slots each)
           on it, and the requests sent to it
  cross    two instances sharing Redis and PostgreSQL; every node on the
           first, every request sent to the second
For each rate of --rates (rising), a step: 1 s at that rate that is not
counted, then --duration counted. Open loop: request i is due at
start + i/rate and goes out then from its own goroutine, whatever the
others are doing; its latency counts from that due time to its answer, so
a generator that falls behind cannot hide the wait (no coordinated
omission). A request that went out more than 10 ms after its due time is
late. Every request ends ok, with an error (and its status), or as a
timeout (no answer by --task-timeout plus --grace). The echo takes no
time, so the latency is the overhead. The report has a row per mode and
rate (sent, ok, errors, timeouts, late, worst lag, p50/p95/p99, the p99
over the NATS p99 at that rate, the most requests in flight, the HTTP
connections dialled), and per mode the first rate whose p99 passes 10 ms.
When a step had as many requests in flight as the nodes have slots, the
slots may be its limit: the report says so.

Every node is an open socket in this process and one in its instance: the
load test raises its RLIMIT_NOFILE to the hard limit (the instances inherit
it) and refuses a --nodes that cannot fit under it (ulimit -Hn).

Every request is recorded with exactly one outcome: a result, an explicit
error with its code, or LOST (nothing by its deadline plus --grace).

Criteria (DESIGN §8, our bars), judged per run; exit status 0 only if none
fails (a SKIP, e.g. the fault on 1 instance, does not fail):
  lost tasks                 0, and every request has exactly one outcome
  hop adds at p95 / p99      overhead (latency − processing_time_ms) percentile
                             minus the 1-instance run's: ≤ 2 ms / ≤ 5 ms
  CPU per instance           mean over the steady phase < 15% of one core at
                             100 requests/s (scaled: cpu% × 100/rate)
  memory over steady phase   RSS growth < 3% (mean of the last fifth vs the
                             first fifth of each stretch without a fault, of
                             at least --mem-min-stretch; shorter: SKIP)
  killed instance's tasks    tasks running on its nodes for other instances'
                             requests get 502 node_disconnected within 1.5 s
  drain loses nothing        (--fault sigterm) its in-flight requests succeed
  other tasks unaffected     every other request succeeds
  instances stay up          no instance exits unless signalled
The fleet profile judges instead:
  idle CPU per instance      the busiest instance < 5% of one core over the
                             idle window (--bar-idle-cpu)
  idle Redis commands/s      < 3,000 over the idle window, every server
                             together (--bar-idle-redis)
  lost tasks, other tasks unaffected, instances stay up   as above, for the
                             loaded window's requests (each gets exactly one
                             outcome, and succeeds)
The loaded window's CPU and Redis figures are reported, not judged.
The sweep profile judges instead (issue 13; a SKIP when its mode or rate,
or the NATS step it compares with, did not run):
  local p99 vs NATS          at 5000/s: ≤ 2× the NATS p99 (--bar-sweep-local);
                             the floor's p99 at the same rate is shown beside
                             it (a bar under the floor's is out of reach here)
  cross p99 vs NATS          at 2500/s: ≤ 3× the NATS p99 (--bar-sweep-cross)
  cross on schedule          at 5000/s: 0 late, 0 errors, 0 timeouts
  every request one outcome, instances stay up   as above
  A p99 leaves out requests that were not ok; a step where more than 1 %
  were not fails its p99 bar (and is its mode's knee).

Output: a progress line on stderr every second (while the nodes connect:
how many have registered), a table on stdout, --json and --html reports.
The header names the Redis the run used. Exit status: 0 pass, 1 a criterion
failed, 2 the run could not be carried out (bad usage, an instance that
would not start, Redis or PostgreSQL unreachable, more nodes than open
files allow, interrupted).

Profiles (flags override them):
  seed   instances 1,2,3; 200 nodes; handlers 50ms–500ms; ramp to 200 over
         30s; 100 requests/s for 10m; 50 streams of 5s; kill mid-run
  smoke  instances 1,2; 40 nodes; handlers 50ms–500ms; ramp to 40 over 3s;
         50 requests/s for 15s; 10 streams of 2s; kill mid-run
  fleet  instances 1,2,3; 10,000 nodes connecting 500/s; idle 60s; then
         100 requests/s for 60s, handlers 10ms–50ms; no fault
  sweep  modes nats,floor,local,cross; rates 1000,2500,5000,10000; 20 echo
         workers; each step 1s warm-up + 10s; task timeout 10s

Examples:
  loadtest --profile smoke --html smoke.html
  loadtest --profile seed --json seed.json --html seed.html
  loadtest --profile smoke --fault sigterm
  loadtest --profile smoke --redis-cluster
  loadtest --profile fleet --instances 3 --nodes 9000 --json fleet.json
  loadtest --profile fleet --redis-cluster --nodes 1000 --idle 20s --duration 20s
  loadtest --profile sweep --json sweep.json
  loadtest --profile sweep --modes nats,local --rates 500,1000 --duration 5s
  loadtest --target http://a:8800 --target http://b:8800 --api-key K1 --api-key K2 \
      --rate 50 --duration 2m

Flags (defaults shown are the chosen profile's):
`)
	fs.PrintDefaults()
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
