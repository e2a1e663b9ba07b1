package main

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Faults that can be injected into one instance mid-run.
const (
	FaultNone    = "none"
	FaultKill    = "kill"    // SIGKILL: the instance vanishes
	FaultSIGTERM = "sigterm" // the instance drains and exits
)

// Bars are the pass criteria of DESIGN §8 ("our bar" column).
type Bars struct {
	HopP95      time.Duration // added overhead at p95 vs 1 instance; default 2 ms
	HopP99      time.Duration // added overhead at p99 vs 1 instance; default 5 ms
	CPUPercent  float64       // per instance, % of one core at 100 requests/s; default 15
	MemGrowth   float64       // RSS growth over the steady phase, fraction; default 0.03
	FaultToFail time.Duration // kill → 502 of the victim's tasks; default 1.5 s

	// The fleet profile's (DESIGN §8 "at fleet scale", issue 9).
	IdleCPUPercent float64 // busiest instance while idle, % of one core; default 5
	IdleRedisOps   float64 // Redis commands/s while idle, every server together; default 3000

	// The sweep profile's (issue 13): a switchyard mode's p99 over the
	// embedded NATS baseline's at the same rate.
	SweepLocal float64 // local at 5000 requests/s, at most this × NATS's p99; default 2
	SweepCross float64 // cross at 2500 requests/s, at most this × NATS's p99; default 3
}

// DefaultBars are DESIGN §8's bars.
var DefaultBars = Bars{HopP95: 2 * time.Millisecond, HopP99: 5 * time.Millisecond, CPUPercent: 15, MemGrowth: 0.03,
	FaultToFail: 1500 * time.Millisecond, IdleCPUPercent: 5, IdleRedisOps: 3000, SweepLocal: 2, SweepCross: 3}

// Config is one invocation of the load test. Zero values mean the default
// stated beside the field; the profile fills them before flags override.
type Config struct {
	Profile string // "seed", "smoke", "fleet" or "sweep": only a label once the fields are filled

	// Fleet selects the fleet profile's shape: once the nodes have
	// registered (and Settle has passed), an idle window of Idle with no
	// requests at all, then a loaded window (the steady phase: Rate for
	// Duration), each reported as CPU per instance and Redis commands/s
	// and judged by the idle bars; no hop, memory or fault criteria.
	Fleet bool
	Idle  time.Duration // the fleet's idle window; default 60 s

	// Sweep selects the sweep profile's shape (issue 13, sweep.go): for
	// each of Modes in turn, one open-loop step per rate of Rates, each a
	// warm-up second that is not counted and then Duration counted,
	// against Nodes echo workers; no ramp, streams, fault or instance
	// counts (the mode fixes the instances).
	Sweep bool
	Modes []string  // sweep modes, run in this order: nats, floor, local, cross; default all four
	Rates []float64 // sweep rates in requests/s, ascending; default 1000, 2500, 5000, 10000

	// Where the instances come from: started here (Switchyard, RedisURL,
	// DatabaseURL) or already running (Targets with APIKeys).
	Switchyard string // the switchyard binary; "" builds ./cmd/switchyard into a temporary directory
	RedisURL   string // default redis://127.0.0.1:6379/0; ignored with RedisCluster
	// RedisCluster starts a Redis Cluster of 3 masters (redis-server
	// processes on free loopback ports, no persistence) for the whole
	// invocation and runs every instance with --redis-cluster on it; it is
	// discarded at the end. Spawn mode only.
	RedisCluster bool
	DatabaseURL  string   // default postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable
	Targets      []string // base URLs of running instances; non-empty selects target mode
	APIKeys      []string // target mode: keys for nodes and clients (round robin)
	ServeArgs    []string // extra arguments for every `switchyard serve` started here
	LogDir       string   // instance logs; default a temporary directory, kept when a criterion fails

	// The load.
	Instances   []int   // instance counts to compare, in order; the 1 is the baseline
	Nodes       int     // simulated nodes, node i on instance i mod N
	ConnectRate float64 // nodes connected per second (paced, not all at once); default 500
	// NodesPerProcess is the fleet profile's most nodes in one process
	// (each is a socket, and RLIMIT_NOFILE bounds a process's): the rest
	// run in helper processes (fleethelper.go). Default 9,000.
	NodesPerProcess int
	NodeConcurrency int           // max_concurrency each node declares; default 4 (the server's default)
	HandlerMin      time.Duration // plain handler sleep, uniform in [min, max]
	HandlerMax      time.Duration
	RampTo          int           // concurrency reached at the end of the ramp
	Ramp            time.Duration // length of the ramp
	Rate            float64       // steady plain requests per second (open loop)
	Duration        time.Duration // length of the steady phase
	Streams         int           // concurrent streams during the steady phase
	StreamLength    time.Duration // how long each stream's handler streams
	StreamChunks    int           // chunks per stream; default 4 per second of StreamLength
	ClientAccounts  int           // accounts (keys) the clients use, spawn mode; default 8
	NodeAccounts    int           // accounts the nodes use, spawn mode; default 4
	TaskTimeout     time.Duration // the instances' --task-timeout and a plain request's deadline; default 60 s
	Grace           time.Duration // past the deadline, a request with no outcome is LOST; default 2 s
	NoRehome        bool          // leave a lost instance's nodes retrying its address instead of moving them

	// The fault.
	Fault         string        // none, kill or sigterm
	FaultAt       time.Duration // from the start of the steady phase; default half of Duration
	FaultInstance int           // number (1-based) of the victim; 0 (default): chosen at the fault (load.go)
	FaultWait     time.Duration // at most this long past FaultAt, wait for a task to be in flight on the victim; default 10 s
	Settle        time.Duration // after the fault, excluded from the hop and memory figures; default 5 s

	// MemMinStretch is the shortest stretch of the steady phase whose
	// memory growth is judged; default 60 s. A shorter one cannot tell a
	// leak from the heap still growing to its working size.
	MemMinStretch time.Duration

	Bars Bars
}

// Profiles are the named starting points; every field can be overridden.
var Profiles = map[string]Config{
	// Seed 002 §4.1 exactly, and DESIGN §8.
	"seed": {
		Instances: []int{1, 2, 3}, Nodes: 200, HandlerMin: 50 * time.Millisecond, HandlerMax: 500 * time.Millisecond,
		RampTo: 200, Ramp: 30 * time.Second, Rate: 100, Duration: 10 * time.Minute,
		Streams: 50, StreamLength: 5 * time.Second, Fault: FaultKill,
	},
	// The same shape in about a minute.
	"smoke": {
		Instances: []int{1, 2}, Nodes: 40, HandlerMin: 50 * time.Millisecond, HandlerMax: 500 * time.Millisecond,
		RampTo: 40, Ramp: 3 * time.Second, Rate: 50, Duration: 15 * time.Second,
		Streams: 10, StreamLength: 2 * time.Second, Fault: FaultKill,
	},
	// DESIGN §8 at fleet scale (issue 9): 10,000 idle nodes, then 100
	// short requests/s, on 1, 2 and 3 instances.
	"fleet": {
		Fleet: true, Instances: []int{1, 2, 3}, Nodes: 10000, HandlerMin: 10 * time.Millisecond, HandlerMax: 50 * time.Millisecond,
		Idle: 60 * time.Second, Rate: 100, Duration: 60 * time.Second, Fault: FaultNone,
	},
	// Issue 13's measuring tool: an open-loop rate sweep of echo requests
	// on the embedded NATS baseline, one instance and two. The task
	// timeout is short: an echo answers in milliseconds or not at all,
	// and a saturated step should not hold the sweep for a minute.
	"sweep": {
		Sweep: true, Modes: []string{ModeNATS, ModeFloor, ModeLocal, ModeCross}, Rates: []float64{1000, 2500, 5000, 10000},
		Nodes: 20, Duration: 10 * time.Second, TaskTimeout: 10 * time.Second, Fault: FaultNone,
	},
}

// profileNames lists the profiles for messages.
const profileNames = "seed, smoke, fleet or sweep"

// withDefaults validates c and returns a copy with the defaults filled.
func (c Config) withDefaults() (Config, error) {
	c.Instances = append([]int(nil), c.Instances...)
	c.Targets = append([]string(nil), c.Targets...)
	c.APIKeys = append([]string(nil), c.APIKeys...)
	c.ServeArgs = append([]string(nil), c.ServeArgs...)
	c.Modes = append([]string(nil), c.Modes...)
	c.Rates = append([]float64(nil), c.Rates...)
	if c.RedisURL == "" {
		c.RedisURL = "redis://127.0.0.1:6379/0"
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	if c.NodeConcurrency == 0 {
		c.NodeConcurrency = 4
	}
	if c.NodesPerProcess == 0 {
		c.NodesPerProcess = defaultNodesPerProcess
	}
	if c.ConnectRate == 0 {
		c.ConnectRate = 500
	}
	if c.Fleet && c.Idle == 0 {
		c.Idle = 60 * time.Second
	}
	if c.StreamChunks == 0 {
		c.StreamChunks = max(1, int(math.Round(4*c.StreamLength.Seconds())))
	}
	if c.ClientAccounts == 0 {
		c.ClientAccounts = 8
	}
	if c.NodeAccounts == 0 {
		c.NodeAccounts = 4
	}
	if c.TaskTimeout == 0 {
		c.TaskTimeout = 60 * time.Second
	}
	if c.Grace == 0 {
		c.Grace = 2 * time.Second
	}
	if c.Fault == "" {
		c.Fault = FaultNone
	}
	if c.FaultAt == 0 {
		c.FaultAt = c.Duration / 2
	}
	if c.FaultWait == 0 {
		c.FaultWait = 10 * time.Second
	}
	if c.Settle == 0 {
		c.Settle = 5 * time.Second
	}
	if c.MemMinStretch == 0 {
		c.MemMinStretch = time.Minute
	}
	if c.Bars == (Bars{}) {
		c.Bars = DefaultBars
	}
	if c.Bars.IdleCPUPercent == 0 {
		c.Bars.IdleCPUPercent = DefaultBars.IdleCPUPercent
	}
	if c.Bars.IdleRedisOps == 0 {
		c.Bars.IdleRedisOps = DefaultBars.IdleRedisOps
	}
	if c.Bars.SweepLocal == 0 {
		c.Bars.SweepLocal = DefaultBars.SweepLocal
	}
	if c.Bars.SweepCross == 0 {
		c.Bars.SweepCross = DefaultBars.SweepCross
	}
	if c.Sweep {
		return c, c.sweepErrors()
	}

	var errs []error
	if len(c.Modes) > 0 || len(c.Rates) > 0 {
		errs = append(errs, errors.New("--modes and --rates belong to the sweep profile (--profile sweep)"))
	}
	if len(c.Instances) == 0 {
		errs = append(errs, errors.New("--instances must list at least one instance count"))
	}
	for _, n := range c.Instances {
		if n < 1 {
			errs = append(errs, fmt.Errorf("--instances: %d is not a positive instance count", n))
		}
		if len(c.Targets) > 0 && n > len(c.Targets) {
			errs = append(errs, fmt.Errorf("--instances: %d instances asked for, but only %d --target given", n, len(c.Targets)))
		}
	}
	for _, t := range c.Targets {
		if u, err := url.Parse(t); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--target %q must be a base URL such as http://host:8800", t))
		}
	}
	if len(c.Targets) > 0 {
		if len(c.APIKeys) == 0 {
			errs = append(errs, errors.New("--target needs at least one --api-key (see `switchyard accounts create`)"))
		}
		if c.Fault != FaultNone {
			errs = append(errs, fmt.Errorf("--fault %s needs instances this program started (it signals their processes); with --target use --fault none", c.Fault))
		}
		if len(c.ServeArgs) > 0 {
			errs = append(errs, errors.New("--serve-arg applies only to instances this program starts, not to --target"))
		}
		if c.RedisCluster {
			errs = append(errs, errors.New("--redis-cluster starts a Redis Cluster for instances this program starts; --target instances use their own Redis"))
		}
	}
	if c.Fleet && c.Fault != FaultNone {
		errs = append(errs, fmt.Errorf("--fault %s: the fleet profile measures an idle and a loaded window and injects no fault (use --fault none)", c.Fault))
	}
	if !c.Fleet && c.Idle != 0 {
		errs = append(errs, errors.New("--idle is the fleet profile's idle window (--profile fleet)"))
	}
	switch {
	case c.Nodes < 1:
		errs = append(errs, errors.New("--nodes must be at least 1"))
	case c.NodesPerProcess < 0:
		errs = append(errs, errors.New("--nodes-per-process must be positive"))
	case c.ConnectRate < 0:
		errs = append(errs, errors.New("--connect-rate must be positive"))
	case c.Idle < 0 || (c.Fleet && c.Idle < time.Second):
		errs = append(errs, errors.New("--idle must be at least 1s"))
	case c.NodeConcurrency < 1:
		errs = append(errs, errors.New("--node-concurrency must be at least 1"))
	case c.HandlerMin < 0 || c.HandlerMax < c.HandlerMin:
		errs = append(errs, fmt.Errorf("--handler-min (%v) and --handler-max (%v) must satisfy 0 ≤ min ≤ max", c.HandlerMin, c.HandlerMax))
	case c.RampTo < 0 || c.Ramp < 0:
		errs = append(errs, errors.New("--ramp-to and --ramp must not be negative"))
	case c.RampTo > 0 && c.Ramp == 0:
		errs = append(errs, errors.New("--ramp-to needs a --ramp length"))
	case c.Rate <= 0:
		errs = append(errs, errors.New("--rate must be positive"))
	case c.Duration <= 0:
		errs = append(errs, errors.New("--duration must be positive"))
	case c.Streams < 0 || (c.Streams > 0 && c.StreamLength <= 0):
		errs = append(errs, errors.New("--streams needs a positive --stream-seconds"))
	case c.Fault != FaultNone && c.Fault != FaultKill && c.Fault != FaultSIGTERM:
		errs = append(errs, fmt.Errorf("--fault %q: use none, kill or sigterm", c.Fault))
	case c.FaultAt < 0 || c.FaultAt >= c.Duration:
		errs = append(errs, fmt.Errorf("--fault-at %v must fall inside the steady phase (0 < T < --duration %v)", c.FaultAt, c.Duration))
	case c.TaskTimeout < time.Second:
		errs = append(errs, errors.New("--task-timeout must be at least 1s"))
	case c.ClientAccounts < 1 || c.NodeAccounts < 1:
		errs = append(errs, errors.New("--client-accounts and --node-accounts must be at least 1"))
	}
	return c, errors.Join(errs...)
}

// spawn reports whether the instances are started here.
func (c Config) spawn() bool { return len(c.Targets) == 0 }

// victim is the index of the instance the fault hits in a run of n.
func (c Config) victim(n int) int {
	if c.FaultInstance < 1 || c.FaultInstance > n {
		return n - 1
	}
	return c.FaultInstance - 1
}

// summary is the one-line description of the load shape in the report.
func (c Config) summary() string {
	var b strings.Builder
	if c.Sweep {
		return c.sweepSummary()
	}
	if c.Fleet {
		fmt.Fprintf(&b, "%d nodes (max_concurrency %d) connected at %g/s; idle for %v with no requests, then %g requests/s for %v (handlers %v–%v)",
			c.Nodes, c.NodeConcurrency, c.ConnectRate, c.Idle, c.Rate, c.Duration, c.HandlerMin, c.HandlerMax)
		if c.RampTo > 0 {
			fmt.Fprintf(&b, " after a ramp to %d concurrent over %v", c.RampTo, c.Ramp)
		}
		if c.Streams > 0 {
			fmt.Fprintf(&b, " with %d concurrent streams of %v (%d chunks)", c.Streams, c.StreamLength, c.StreamChunks)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "%d nodes (max_concurrency %d), handlers %v–%v; ramp to %d concurrent over %v; %g requests/s for %v",
		c.Nodes, c.NodeConcurrency, c.HandlerMin, c.HandlerMax, c.RampTo, c.Ramp, c.Rate, c.Duration)
	if c.Streams > 0 {
		fmt.Fprintf(&b, " with %d concurrent streams of %v (%d chunks)", c.Streams, c.StreamLength, c.StreamChunks)
	}
	switch c.Fault {
	case FaultKill:
		fmt.Fprintf(&b, "; kill -9 of one instance %v into the steady phase", c.FaultAt)
	case FaultSIGTERM:
		fmt.Fprintf(&b, "; SIGTERM (drain) of one instance %v into the steady phase", c.FaultAt)
	}
	return b.String()
}

// fileReserve is the open files the load test needs besides one socket
// per node: its HTTP clients' connections (the ramp's workers, the
// streams, about two seconds of open-loop requests; for the sweep, one
// second of its top rate, which holds as many connections only if every
// answer takes a second), Redis and PostgreSQL pools, instance logs, and
// some slack.
// localNodes is how many of the nodes the load test's own process holds:
// all of them, but in the fleet profile at most NodesPerProcess (the
// rest go to helper processes, NodesPerProcess each).
func (c Config) localNodes() int {
	if !c.Fleet {
		return c.Nodes
	}
	return min(c.Nodes, max(c.NodesPerProcess, 1))
}

// socketsPerProcess is the most node sockets one process holds in the run:
// the load test's own, a helper, or an instance of the smallest instance
// count (which holds its share of the nodes; it inherits the limit).
func (c Config) socketsPerProcess() int {
	most := c.localNodes()
	if c.spawn() && len(c.Instances) > 0 {
		fewest := slices.Min(c.Instances)
		most = max(most, (c.Nodes+fewest-1)/max(fewest, 1))
	}
	return most
}

func fileReserve(c Config) uint64 {
	if c.Sweep {
		top := 0.0
		for _, r := range c.Rates {
			top = max(top, r)
		}
		return 256 + uint64(top)
	}
	return 256 + uint64(max(c.RampTo, 0)) + uint64(max(c.Streams, 0)) + uint64(max(2*c.Rate, 0))
}
