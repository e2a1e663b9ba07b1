package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The sweep's modes.
const (
	ModeNATS  = "nats"  // the embedded NATS baseline
	ModeLocal = "local" // one instance; the nodes and the requests on it
	ModeCross = "cross" // two instances; every node on the first, every request to the second
	ModeFloor = "floor" // a bare forwarder in place of switchyard
)

// SweepModes are every sweep mode, in the order the sweep profile runs them.
var SweepModes = []string{ModeNATS, ModeFloor, ModeLocal, ModeCross}

// The sweep's fixed figures.
const (
	SweepWarmup = time.Second           // each step's first second, sent at its rate but not counted
	SweepLate   = 10 * time.Millisecond // a request that went out later than this after its due time is late
	SweepKneeMs = 10.0                  // "p99 passes 10 ms at": the knee of a mode's curve
)

// FloorMaxSlots is the most slots the floor mode's forwarder holds: more
// than the sweep's nodes may declare (Nodes × NodeConcurrency).
const FloorMaxSlots = 1 << 16

// ParseModes reads --modes: a comma-separated list of sweep modes.
func ParseModes(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(p))
	}
	return out, checkModes(out)
}

func checkModes(modes []string) error {
	if len(modes) == 0 {
		return errors.New("--modes must name at least one of nats, floor, local and cross")
	}
	var errs []error
	for i, m := range modes {
		if !slices.Contains(SweepModes, m) {
			errs = append(errs, fmt.Errorf("--modes: %q is not a mode: use nats, floor, local or cross", m))
		} else if slices.Contains(modes[:i], m) {
			errs = append(errs, fmt.Errorf("--modes names %s twice", m))
		}
	}
	return errors.Join(errs...)
}

// ParseRates reads --rates: a comma-separated list of requests/s.
func ParseRates(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return nil, fmt.Errorf("--rates: %q is not a list of requests/s such as 1000,2500,5000", s)
		}
		out = append(out, v)
	}
	return out, checkRates(out)
}

func checkRates(rates []float64) error {
	if len(rates) == 0 {
		return errors.New("--rates must list at least one rate")
	}
	var errs []error
	for i, r := range rates {
		if !(r > 0) || math.IsInf(r, 0) {
			errs = append(errs, fmt.Errorf("--rates: %g is not a positive rate", r))
		} else if i > 0 && r <= rates[i-1] {
			errs = append(errs, fmt.Errorf("--rates must rise (%g after %g): the knee is the first rate whose p99 passes 10 ms", r, rates[i-1]))
		}
	}
	return errors.Join(errs...)
}

func (c Config) sweepSummary() string {
	rates := make([]string, len(c.Rates))
	for i, r := range c.Rates {
		rates[i] = strconv.FormatFloat(r, 'g', -1, 64)
	}
	return fmt.Sprintf("open-loop sweep of echo requests: modes %s; rates %s requests/s, each %v warm-up then %v counted; %d echo workers (switchyard nodes: max_concurrency %d); task timeout %v",
		strings.Join(c.Modes, ", "), strings.Join(rates, ", "), SweepWarmup, c.Duration, c.Nodes, c.NodeConcurrency, c.TaskTimeout)
}
