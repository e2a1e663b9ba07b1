package main

import (
	"errors"
	"fmt"
	"math"
	"net/url"
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
}

// DefaultBars are DESIGN §8's bars.
var DefaultBars = Bars{HopP95: 2 * time.Millisecond, HopP99: 5 * time.Millisecond, CPUPercent: 15, MemGrowth: 0.03, FaultToFail: 1500 * time.Millisecond}

// Config is one invocation of the load test. Zero values mean the default
// stated beside the field; the profile fills them before flags override.
type Config struct {
	Profile string // "seed" or "smoke": only a label once the fields are filled

	// Where the instances come from: started here (Switchyard, RedisURL,
	// DatabaseURL) or already running (Targets with APIKeys).
	Switchyard  string   // the switchyard binary; "" builds ./cmd/switchyard into a temporary directory
	RedisURL    string   // default redis://127.0.0.1:6379/0
	DatabaseURL string   // default postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable
	Targets     []string // base URLs of running instances; non-empty selects target mode
	APIKeys     []string // target mode: keys for nodes and clients (round robin)
	ServeArgs   []string // extra arguments for every `switchyard serve` started here
	LogDir      string   // instance logs; default a temporary directory, kept when a criterion fails

	// The load.
	Instances       []int         // instance counts to compare, in order; the 1 is the baseline
	Nodes           int           // simulated nodes, node i on instance i mod N
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
}

// withDefaults validates c and returns a copy with the defaults filled.
func (c Config) withDefaults() (Config, error) {
	c.Instances = append([]int(nil), c.Instances...)
	c.Targets = append([]string(nil), c.Targets...)
	c.APIKeys = append([]string(nil), c.APIKeys...)
	c.ServeArgs = append([]string(nil), c.ServeArgs...)
	if c.RedisURL == "" {
		c.RedisURL = "redis://127.0.0.1:6379/0"
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	if c.NodeConcurrency == 0 {
		c.NodeConcurrency = 4
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

	var errs []error
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
	}
	switch {
	case c.Nodes < 1:
		errs = append(errs, errors.New("--nodes must be at least 1"))
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
