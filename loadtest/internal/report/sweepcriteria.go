package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// The rates the sweep profile's bars are set at.
const (
	sweepLocalRate    = 5000
	sweepCrossRate    = 2500
	sweepScheduleRate = 5000
)

// EvaluateSweep judges the sweep against the sweep profile's bars. A bar whose
// mode or rate did not run is a SKIP; so is a ratio without a NATS step
// at its rate to compare with.
func EvaluateSweep(s *SweepReport, b config.Bars) []Criterion {
	out := []Criterion{evalSweepOutcomes(s)}
	out = append(out, evalSweepRatio(s, config.ModeLocal, CritSweepLocal, sweepLocalRate, b.SweepLocal))
	out = append(out, evalSweepRatio(s, config.ModeCross, CritSweepCross, sweepCrossRate, b.SweepCross))
	out = append(out, evalSweepSchedule(s))
	c := Criterion{Scope: "sweep", Name: CritInstances, Bar: "no instance exits unless signalled"}
	switch {
	case len(s.Members) == 0:
		c.Status, c.Figure = Skip, "no switchyard mode ran"
	default:
		c.Figure = fmt.Sprintf("%d exited unexpectedly", len(s.Exited))
		c.Status, c.Detail = verdict(len(s.Exited) == 0), strings.Join(s.Exited, "; ")
	}
	return append(out, c)
}

func evalSweepOutcomes(s *SweepReport) Criterion {
	c := Criterion{Scope: "sweep", Name: CritSweepOutcomes, Bar: "every request sent is counted once: ok, an error or a timeout"}
	sent, counted := 0, 0
	var why []string
	for _, r := range s.Rows {
		sent += r.Sent
		counted += r.OK + r.Errors + r.Timeouts
		if r.NoOutcome > 0 || r.Doubles > 0 || r.OK+r.Errors+r.Timeouts != r.Sent {
			why = append(why, fmt.Sprintf("%s at %g/s: %d sent, %d ok + %d errors + %d timeouts, %d without an outcome, %d second outcomes",
				r.Mode, r.Rate, r.Sent, r.OK, r.Errors, r.Timeouts, r.NoOutcome, r.Doubles))
		}
	}
	c.Figure = fmt.Sprintf("%d outcomes for %d requests over %d steps", counted, sent, len(s.Rows))
	c.Status, c.Detail = verdict(len(why) == 0), strings.Join(why, "; ")
	return c
}

// evalSweepRatio judges mode's p99 at rate against bar × the NATS p99 at
// the same rate.
func evalSweepRatio(s *SweepReport, mode, name string, rate, bar float64) Criterion {
	c := Criterion{Scope: fmt.Sprintf("%g/s", rate), Name: name, Bar: fmt.Sprintf("p99 ≤ %g× the NATS p99 at %g requests/s", bar, rate)}
	row, base := s.row(mode, rate), s.row(config.ModeNATS, rate)
	switch {
	case row == nil:
		c.Status, c.Figure = Skip, fmt.Sprintf("%s did not run at %g requests/s (--modes, --rates)", mode, rate)
		return c
	case base == nil:
		c.Status, c.Figure = Skip, fmt.Sprintf("no NATS step at %g requests/s to compare with (add nats to --modes)", rate)
		return c
	case base.p99Unknown() || base.notOK() > 0:
		// A baseline that lost requests is no baseline: the bar cannot be
		// judged, and a PASS against it would mean nothing.
		c.Status, c.Figure = Fail, fmt.Sprintf("the NATS baseline itself did not answer %d of %d requests ok", base.notOK(), base.Sent)
		c.Detail = "rerun on a quieter machine: the baseline must answer every request"
		return c
	case row.p99Unknown():
		c.Status, c.Figure = Fail, fmt.Sprintf("%d of %d requests did not come back ok: the p99 of the requests sent is a failure", row.notOK(), row.Sent)
		c.Detail = floorNote(s, mode, rate, bar, base)
		return c
	}
	ratio := row.Latency.P99 / base.Latency.P99
	c.Figure = fmt.Sprintf("%.2f× (p99 %.2f ms vs NATS %.2f ms", ratio, row.Latency.P99, base.Latency.P99)
	if n := row.notOK(); n > 0 {
		c.Figure += fmt.Sprintf("; %d requests not ok, left out", n)
	}
	c.Figure += ")"
	c.Status = verdict(ratio <= bar)
	if c.Status == Fail {
		c.Detail = fmt.Sprintf("over the bar by %.2f×: p99 %.2f ms, the bar %.2f ms", ratio-bar, row.Latency.P99, bar*base.Latency.P99)
	}
	if f := floorNote(s, mode, rate, bar, base); f != "" {
		c.Detail = strings.TrimPrefix(c.Detail+"; "+f, "; ")
	}
	return c
}

// floorNote says, for the local bar, what the floor mode's p99 was at the
// same rate: how much of the figure any coordinator of this protocol pays
// on this machine, and whether the bar is within reach at all. The floor
// has one instance's path, so it says nothing of the cross bar.
func floorNote(s *SweepReport, mode string, rate, bar float64, base *SweepRow) string {
	f := s.row(config.ModeFloor, rate)
	if mode != config.ModeLocal || f == nil || f.p99Unknown() || f.Latency.P99 <= 0 {
		return ""
	}
	note := fmt.Sprintf("the floor (a bare forwarder, same client and nodes): p99 %.2f ms, %.2f× NATS", f.Latency.P99, f.Latency.P99/base.Latency.P99)
	if f.Latency.P99 > bar*base.Latency.P99 {
		note += ", itself over the bar: out of reach on this machine"
	}
	return note
}

// evalSweepSchedule judges the cross mode at 5000 requests/s: every
// request went out on schedule and was answered.
func evalSweepSchedule(s *SweepReport) Criterion {
	c := Criterion{Scope: fmt.Sprintf("%d/s", sweepScheduleRate), Name: CritSweepSchedule,
		Bar: fmt.Sprintf("every request sent within %.0f ms of its due time and answered ok (0 late, 0 errors, 0 lost)", stats.Ms(config.SweepLate))}
	r := s.row(config.ModeCross, sweepScheduleRate)
	if r == nil {
		c.Status, c.Figure = Skip, fmt.Sprintf("cross did not run at %d requests/s (--modes, --rates)", sweepScheduleRate)
		return c
	}
	c.Figure = fmt.Sprintf("%d of %d due sent, %d late (worst lag %.1f ms); %d ok, %d errors, %d timeouts",
		r.Sent, r.Expected, r.Late, r.MaxLagMs, r.OK, r.Errors, r.Timeouts)
	c.Status = verdict(r.Sent == r.Expected && r.Late == 0 && r.OK == r.Sent && r.NoOutcome == 0)
	if c.Status == Fail && len(r.NonOK) > 0 {
		keys := make([]string, 0, len(r.NonOK))
		for k := range r.NonOK {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s ×%d", k, r.NonOK[k])
		}
		c.Detail = "not ok: " + strings.Join(parts, ", ")
	}
	return c
}
