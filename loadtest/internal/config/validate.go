package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"
)

// Validate checks c as it will run (its defaults filled, so a zero field
// is its default, never a problem) and returns every problem it finds,
// joined, each a sentence naming the flag to change. A problem that
// follows from another (a --fault-at outside a --duration that is itself
// invalid) is left for the next try.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !c.faultKnown() {
		bad("--fault %q: use none, kill or sigterm", c.Fault)
	}
	if c.Nodes < 1 {
		bad("--nodes must be at least 1")
	}
	if c.NodeConcurrency < 1 {
		bad("--node-concurrency must be at least 1")
	}
	if c.Duration <= 0 {
		bad("--duration must be positive")
	}
	if c.TaskTimeout < time.Second {
		bad("--task-timeout must be at least 1s")
	}
	if c.Grace < 0 {
		bad("--grace must not be negative")
	}
	if c.ClientAccounts < 1 || c.NodeAccounts < 1 {
		bad("--client-accounts and --node-accounts must be at least 1")
	}
	if c.Sweep {
		return errors.Join(append(errs, c.sweepProblems()...)...)
	}
	if c.Burst {
		return errors.Join(append(errs, c.burstProblems()...)...)
	}
	return errors.Join(append(errs, c.runProblems()...)...)
}

func (c Config) faultKnown() bool {
	return c.Fault == FaultNone || c.Fault == FaultKill || c.Fault == FaultSIGTERM
}

// sweepProblems are the sweep profile's: its modes and rates, and the
// flags of the other profiles it has no use for.
func (c Config) sweepProblems() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := checkModes(c.Modes); err != nil {
		errs = append(errs, err)
	}
	if err := checkRates(c.Rates); err != nil {
		errs = append(errs, err)
	}
	if len(c.Instances) > 0 {
		bad("--instances: the sweep's modes fix the instances (local: 1, cross: 2); choose them with --modes")
	}
	if len(c.Targets) > 0 {
		bad("--target: the sweep starts its own instances (cross puts every node on one and sends every request to the other); leave out --target")
	}
	if c.faultKnown() && c.Fault != FaultNone {
		bad("--fault %s: the sweep injects no fault (use --fault none)", c.Fault)
	}
	if c.RampTo > 0 || c.Streams > 0 {
		bad("--ramp-to and --streams are not part of the sweep: its steps are open-loop plain requests only")
	}
	if c.Fleet || c.Idle != 0 {
		bad("--idle is the fleet profile's idle window (--profile fleet)")
	}
	if slices.Contains(c.Modes, ModeFloor) && c.Nodes*c.NodeConcurrency > FloorMaxSlots {
		bad("--nodes × --node-concurrency is %d, but the floor holds at most %d slots: lower one of them, or leave floor out of --modes",
			c.Nodes*c.NodeConcurrency, FloorMaxSlots)
	}
	return errs
}

// runProblems are those of the profiles made of runs (seed, smoke,
// fleet): the instance counts, the targets, the load's shape and the
// fault.
func (c Config) runProblems() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Modes) > 0 || len(c.Rates) > 0 {
		bad("--modes and --rates belong to the sweep profile (--profile sweep)")
	}
	if len(c.Instances) == 0 {
		bad("--instances must list at least one instance count")
	}
	for _, n := range c.Instances {
		if n < 1 {
			bad("--instances: %d is not a positive instance count: list counts of 1 or more, such as 1,2,3", n)
		}
		if len(c.Targets) > 0 && n > len(c.Targets) {
			bad("--instances: %d instances asked for, but only %d --target given: give more --target or a smaller count", n, len(c.Targets))
		}
	}
	for _, t := range c.Targets {
		if u, err := url.Parse(t); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("--target %q must be a base URL such as http://host:8800", t)
		}
	}
	if len(c.Targets) > 0 {
		if len(c.APIKeys) == 0 {
			bad("--target needs at least one --api-key (see `switchyard accounts create`)")
		}
		if c.faultKnown() && c.Fault != FaultNone {
			bad("--fault %s needs instances this program started (it signals their processes); with --target use --fault none", c.Fault)
		}
		if len(c.ServeArgs) > 0 {
			bad("--serve-arg applies only to instances this program starts, not to --target")
		}
		if c.RedisCluster {
			bad("--redis-cluster starts a Redis Cluster for instances this program starts; --target instances use their own Redis")
		}
	}
	if c.Fleet && c.faultKnown() && c.Fault != FaultNone {
		bad("--fault %s: the fleet profile measures an idle and a loaded window and injects no fault (use --fault none)", c.Fault)
	}
	switch {
	case !c.Fleet && c.Idle != 0:
		bad("--idle is the fleet profile's idle window (--profile fleet)")
	case c.Fleet && c.Idle < time.Second:
		bad("--idle must be at least 1s")
	}
	if c.NodesPerProcess < 0 {
		bad("--nodes-per-process must be positive")
	}
	if c.ConnectRate < 0 {
		bad("--connect-rate must be positive")
	}
	if c.HandlerMin < 0 || c.HandlerMax < c.HandlerMin {
		bad("--handler-min (%v) and --handler-max (%v) must satisfy 0 ≤ min ≤ max", c.HandlerMin, c.HandlerMax)
	}
	switch {
	case c.RampTo < 0 || c.Ramp < 0:
		bad("--ramp-to and --ramp must not be negative")
	case c.RampTo > 0 && c.Ramp == 0:
		bad("--ramp-to needs a --ramp length")
	}
	if c.Rate <= 0 {
		bad("--rate must be positive")
	}
	if c.Streams < 0 || (c.Streams > 0 && c.StreamLength <= 0) {
		bad("--streams needs a positive --stream-seconds")
	}
	if c.StreamChunks < 0 {
		bad("--stream-chunks must not be negative")
	}
	if c.Duration > 0 && (c.FaultAt < 0 || c.FaultAt >= c.Duration) {
		bad("--fault-at %v must fall inside the steady phase (0 < T < --duration %v)", c.FaultAt, c.Duration)
	}
	if c.FaultInstance < 0 {
		bad("--fault-instance must be an instance's number from 1, or 0 to choose the victim at the fault")
	}
	if c.FaultWait < 0 || c.Settle < 0 || c.MemMinStretch < 0 {
		bad("--fault-wait, --settle and --mem-min-stretch must not be negative")
	}
	return errs
}
