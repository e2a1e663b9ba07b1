package config

import (
	"fmt"
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

// Bars are the pass criteria: the "our bar" column of the scaling
// profile's table (docs/BENCHMARKS.md has each profile's runs against
// them). A zero bar means its default.
type Bars struct {
	HopP95      time.Duration // added overhead at p95 vs 1 instance; default 2 ms
	HopP99      time.Duration // added overhead at p99 vs 1 instance; default 5 ms
	CPUPercent  float64       // per instance, % of one core at 100 requests/s; default 15
	MemGrowth   float64       // RSS growth over the steady phase, fraction; default 0.03
	FaultToFail time.Duration // kill → 502 of the victim's tasks; default 1.5 s

	// The fleet profile's: the scaling profile's bars at fleet scale.
	IdleCPUPercent float64 // busiest instance while idle, % of one core; default 5
	IdleRedisOps   float64 // Redis commands/s while idle, every server together; default 3000

	// The sweep profile's: a switchyard mode's p99 over the embedded NATS
	// baseline's at the same rate.
	SweepLocal float64 // local at 5000 requests/s, at most this × NATS's p99; default 2
	SweepCross float64 // cross at 2500 requests/s, at most this × NATS's p99; default 3
}

// DefaultBars are the bars every profile is judged by unless a flag
// changes one.
var DefaultBars = Bars{HopP95: 2 * time.Millisecond, HopP99: 5 * time.Millisecond, CPUPercent: 15, MemGrowth: 0.03,
	FaultToFail: 1500 * time.Millisecond, IdleCPUPercent: 5, IdleRedisOps: 3000, SweepLocal: 2, SweepCross: 3}

// Config is one invocation of the load test. Zero values mean the default
// stated beside the field (WithDefaults fills them); a profile
// (ForProfile) sets the load's shape before flags override it.
type Config struct {
	Profile string // "seed", "smoke", "fleet", "sweep" or "burst": only a label once the fields are filled

	// Fleet selects the fleet profile's shape: once the nodes have
	// registered (and Settle has passed), an idle window of Idle with no
	// requests at all, then a loaded window (the steady phase: Rate for
	// Duration), each reported as CPU per instance and Redis commands/s
	// and judged by the idle bars; no hop, memory or fault criteria.
	Fleet bool
	Idle  time.Duration // the fleet's idle window; default 60 s

	// Sweep selects the sweep profile's shape (the sweep package): for
	// each of Modes in turn, one open-loop step per rate of Rates, each a
	// warm-up second that is not counted and then Duration counted,
	// against Nodes echo workers; no ramp, streams, fault or instance
	// counts (the mode fixes the instances).
	Sweep bool
	Modes []string  // sweep modes, run in this order: nats, floor, local, cross; default all four
	Rates []float64 // sweep rates in requests/s, ascending; default 1000, 2500, 5000, 10000

	// Burst selects the burst profile's shape (the burst package): Nodes
	// SDK nodes connect at once to one instance and are timed until all
	// are registered and listed; then, on a fresh instance, as many naive
	// clients (no backoff, no hint: each reconnects at once) for Duration,
	// and how many registered is counted. No requests, ramp, streams or
	// fault.
	Burst bool

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
	// run in helper processes. Default DefaultNodesPerProcess.
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
	Fault         string        // none, kill or sigterm; default none
	FaultAt       time.Duration // from the start of the steady phase; default half of Duration
	FaultInstance int           // number (1-based) of the victim; 0 (default): chosen at the fault
	FaultWait     time.Duration // at most this long past FaultAt, wait for a task to be in flight on the victim; default 10 s
	Settle        time.Duration // after the fault, excluded from the hop and memory figures; default 5 s

	// MemMinStretch is the shortest stretch of the steady phase whose
	// memory growth is judged; default 60 s. A shorter one cannot tell a
	// leak from the heap still growing to its working size.
	MemMinStretch time.Duration

	Bars Bars
}

// Spawn reports whether the instances are started here.
func (c Config) Spawn() bool { return len(c.Targets) == 0 }

// NeedsInstances reports whether the run starts switchyard instances.
func (c Config) NeedsInstances() bool {
	return !c.Sweep || slices.Contains(c.Modes, ModeLocal) || slices.Contains(c.Modes, ModeCross)
}

// Victim is the index of the instance the fault hits in a run of n.
func (c Config) Victim(n int) int {
	if c.FaultInstance < 1 || c.FaultInstance > n {
		return n - 1
	}
	return c.FaultInstance - 1
}

// Summary is the one-line description of the load shape in the report.
func (c Config) Summary() string {
	var b strings.Builder
	if c.Sweep {
		return c.sweepSummary()
	}
	if c.Burst {
		return fmt.Sprintf("%d Go SDK nodes connecting at once to one instance, until all are registered and listed; then %d naive clients (reconnecting at once, no backoff) for %v on a fresh instance",
			c.Nodes, c.Nodes, c.Duration)
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

// LocalNodes is how many of the nodes the load test's own process holds:
// all of them, but in the fleet profile at most NodesPerProcess (the
// rest go to helper processes, NodesPerProcess each).
func (c Config) LocalNodes() int {
	if !c.Fleet {
		return c.Nodes
	}
	return min(c.Nodes, max(c.NodesPerProcess, 1))
}

// SocketsPerProcess is the most node sockets one process holds in the
// run: the load test's own, a helper, or an instance of the smallest
// instance count (which holds its share of the nodes; it inherits the
// limit).
func (c Config) SocketsPerProcess() int {
	most := c.LocalNodes()
	if c.Spawn() && len(c.Instances) > 0 {
		fewest := slices.Min(c.Instances)
		most = max(most, (c.Nodes+fewest-1)/max(fewest, 1))
	}
	return most
}

// FileReserve is the open files the load test needs besides one socket
// per node: its HTTP clients' connections (the ramp's workers, the
// streams, about two seconds of open-loop requests; for the sweep, one
// second of its top rate, which holds as many connections only if every
// answer takes a second), Redis and PostgreSQL pools, instance logs, and
// some slack.
func (c Config) FileReserve() uint64 {
	if c.Sweep {
		top := 0.0
		for _, r := range c.Rates {
			top = max(top, r)
		}
		return 256 + uint64(top)
	}
	return 256 + uint64(max(c.RampTo, 0)) + uint64(max(c.Streams, 0)) + uint64(max(2*c.Rate, 0))
}
