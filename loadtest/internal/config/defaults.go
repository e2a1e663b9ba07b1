package config

import (
	"fmt"
	"math"
	"time"
)

// DefaultNodesPerProcess is the most simulated nodes one load test
// process holds in the fleet profile (--nodes-per-process). Every node is
// an open socket, and a process may open only RLIMIT_NOFILE files (20,000
// on the machines of docs/BENCHMARKS.md, and no raising it without
// privilege), so a larger fleet puts the rest in helper processes: the
// load test's own binary run as `loadtest fleet-helper`, each holding at
// most this many idle nodes.
const DefaultNodesPerProcess = 9000

// ProfileNames lists the profiles for messages.
const ProfileNames = "seed, smoke, fleet, sweep or burst"

// profiles are the named starting points; every field can be overridden.
// Fields left zero take their defaults (WithDefaults).
var profiles = map[string]Config{
	// The scaling profile, exactly.
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
	// The scaling profile's bars at fleet scale: 10,000 idle nodes, then
	// 100 short requests/s, on 1, 2 and 3 instances.
	"fleet": {
		Fleet: true, Instances: []int{1, 2, 3}, Nodes: 10000, HandlerMin: 10 * time.Millisecond, HandlerMax: 50 * time.Millisecond,
		Rate: 100, Duration: 60 * time.Second, Fault: FaultNone,
	},
	// An open-loop rate sweep of echo requests on the embedded NATS
	// baseline, a bare forwarder, one instance and two. The task timeout
	// is short: an echo answers in milliseconds or not at all, and a
	// saturated step should not hold the sweep for a minute.
	"sweep": {
		Sweep: true, Nodes: 20, Duration: 10 * time.Second, TaskTimeout: 10 * time.Second, Fault: FaultNone,
	},
	// A registration burst: 9,000 nodes at once on one instance, the Go
	// SDK's (which honours the shed's retry_after_ms) timed to the last
	// one, then a naive client's for a minute.
	"burst": {
		Burst: true, Instances: []int{1}, Nodes: 9000, Duration: 60 * time.Second, Fault: FaultNone,
	},
}

// ForProfile returns the profile called name with its defaults filled,
// all but those derived from other fields (FaultAt, StreamChunks), which
// stay zero so that they follow the flags that change what they derive
// from: it is what the flags are bound to. Each call returns fresh
// slices.
func ForProfile(name string) (Config, error) {
	p, ok := profiles[name]
	if !ok {
		return Config{}, fmt.Errorf("--profile %q: use %s", name, ProfileNames)
	}
	p.Profile = name
	return p.fixedDefaults(), nil
}

// WithDefaults returns a copy of c with every zero field that has a
// default filled, and slices of its own: c itself is never changed.
func (c Config) WithDefaults() Config {
	c = c.fixedDefaults()
	// Derived from fields a flag may have changed after the profile set
	// them.
	if c.StreamChunks == 0 {
		c.StreamChunks = max(1, int(math.Round(4*c.StreamLength.Seconds())))
	}
	if c.FaultAt == 0 {
		c.FaultAt = c.Duration / 2
	}
	return c
}

// fixedDefaults fills the defaults that depend on nothing but the
// profile's shape (Fleet, Sweep), on a copy with slices of its own.
func (c Config) fixedDefaults() Config {
	c.Instances = append([]int(nil), c.Instances...)
	c.Targets = append([]string(nil), c.Targets...)
	c.APIKeys = append([]string(nil), c.APIKeys...)
	c.ServeArgs = append([]string(nil), c.ServeArgs...)
	c.Modes = append([]string(nil), c.Modes...)
	c.Rates = append([]float64(nil), c.Rates...)
	if c.Sweep && len(c.Modes) == 0 {
		c.Modes = append([]string(nil), SweepModes...)
	}
	if c.Sweep && len(c.Rates) == 0 {
		c.Rates = []float64{1000, 2500, 5000, 10000}
	}
	if c.Fleet && c.Idle == 0 {
		c.Idle = 60 * time.Second
	}
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
		c.NodesPerProcess = DefaultNodesPerProcess
	}
	if c.ConnectRate == 0 {
		c.ConnectRate = 500
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
	if c.FaultWait == 0 {
		c.FaultWait = 10 * time.Second
	}
	if c.Settle == 0 {
		c.Settle = 5 * time.Second
	}
	if c.MemMinStretch == 0 {
		c.MemMinStretch = time.Minute
	}
	c.Bars = c.Bars.withDefaults()
	return c
}

// withDefaults fills every zero bar with DefaultBars'.
func (b Bars) withDefaults() Bars {
	d := DefaultBars
	fill := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	fillD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	fillD(&b.HopP95, d.HopP95)
	fillD(&b.HopP99, d.HopP99)
	fill(&b.CPUPercent, d.CPUPercent)
	fill(&b.MemGrowth, d.MemGrowth)
	fillD(&b.FaultToFail, d.FaultToFail)
	fill(&b.IdleCPUPercent, d.IdleCPUPercent)
	fill(&b.IdleRedisOps, d.IdleRedisOps)
	fill(&b.SweepLocal, d.SweepLocal)
	fill(&b.SweepCross, d.SweepCross)
	return b
}
