package config

import (
	"fmt"
	"slices"
)

// burstProblems are the burst profile's: one instance started here, no
// requests, and the other profiles' flags it has no use for.
func (c Config) burstProblems() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !slices.Equal(c.Instances, []int{1}) {
		bad("--instances: the burst profile connects every node to one instance (use --instances 1)")
	}
	if len(c.Targets) > 0 {
		bad("--target: the burst profile starts a fresh instance for the SDK nodes and another for the naive clients; leave out --target")
	}
	if len(c.Modes) > 0 || len(c.Rates) > 0 {
		bad("--modes and --rates belong to the sweep profile (--profile sweep)")
	}
	if c.faultKnown() && c.Fault != FaultNone {
		bad("--fault %s: the burst profile injects no fault (use --fault none)", c.Fault)
	}
	if c.RampTo > 0 || c.Streams > 0 || c.Rate > 0 {
		bad("--ramp-to, --streams and --rate are not part of the burst profile: it sends no requests")
	}
	if c.Fleet || c.Idle != 0 {
		bad("--idle is the fleet profile's idle window (--profile fleet)")
	}
	return errs
}
