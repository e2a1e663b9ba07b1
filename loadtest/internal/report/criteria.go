package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// Criterion statuses. A SKIP says why the criterion could not be judged
// in this run (for example: no instance to fail over to); it does not fail
// the run.
const (
	Pass = "PASS"
	Fail = "FAIL"
	Skip = "SKIP"
)

// Criterion names, as printed and as tests look them up.
const (
	CritLost      = "lost tasks"
	CritHopP95    = "hop adds at p95"
	CritHopP99    = "hop adds at p99"
	CritCPU       = "CPU per instance"
	CritMemory    = "memory over steady phase"
	CritFault     = "killed instance's tasks"
	CritDrain     = "drain loses nothing"
	CritUnaffect  = "other tasks unaffected"
	CritInstances = "instances stay up"
	CritIdleCPU   = "idle CPU per instance"
	CritIdleRedis = "idle Redis commands/s"

	// The sweep profile's.
	CritSweepOutcomes = "every request one outcome"
	CritSweepLocal    = "local p99 vs NATS"
	CritSweepCross    = "cross p99 vs NATS"
	CritSweepSchedule = "cross on schedule, answered"
)

// Criterion is one pass criterion judged on one run (Instances) or on the
// comparison of runs.
type Criterion struct {
	Instances int    `json:"instances"`       // the run judged
	Scope     string `json:"scope,omitempty"` // what was judged when it is not a run: a sweep step ("5000/s")
	Name      string `json:"name"`
	Bar       string `json:"bar"`
	Figure    string `json:"figure"` // what was measured
	Status    string `json:"status"`
	Detail    string `json:"detail,omitempty"` // for a FAIL, what missed and where
}

// scope names what c judged: a run ("2 inst"), a sweep step ("5000/s")
// or all of them.
func (c Criterion) scope() string {
	switch {
	case c.Scope != "":
		return c.Scope
	case c.Instances > 0:
		return fmt.Sprintf("%d inst", c.Instances)
	}
	return "all"
}

// Evaluate judges every run against the bars, and the hop of each
// multi-instance run against the 1-instance run.
func Evaluate(runs []*RunReport, b config.Bars) []Criterion {
	var out []Criterion
	base := baseline(runs)
	for _, r := range runs {
		if r.Fleet != nil {
			// The fleet profile: the idle bars, and the loaded window's
			// requests (every one gets one outcome, and succeeds).
			out = append(out, evalLost(r), evalIdleCPU(r, b), evalIdleRedis(r, b))
			out = append(out, evalFault(r, b)...)
			out = append(out, evalInstances(r))
			continue
		}
		out = append(out, evalLost(r))
		out = append(out, evalHop(r, base, b)...)
		out = append(out, evalCPU(r, b), evalMemory(r, b))
		out = append(out, evalFault(r, b)...)
		out = append(out, evalInstances(r))
	}
	return out
}

// Passed reports whether no criterion failed.
func Passed(cs []Criterion) bool {
	return !slices.ContainsFunc(cs, func(c Criterion) bool { return c.Status == Fail })
}

func evalLost(r *RunReport) Criterion {
	a := r.Accounting
	c := Criterion{Instances: r.Instances, Name: CritLost, Bar: "0; every request sent has exactly one outcome"}
	lost := a.Outcomes[ledger.OutcomeLost]
	c.Figure = fmt.Sprintf("%d lost of %d sent", lost, a.Sent)
	var why []string
	if lost > 0 {
		var ids []int64
		for _, rec := range r.Records {
			if rec.Outcome == ledger.OutcomeLost {
				ids = append(ids, rec.ID)
			}
		}
		why = append(why, fmt.Sprintf("%d requests had no outcome by their deadline plus the grace period (ids %v)", lost, FirstN(ids, 10)))
	}
	if len(a.NoOutcome) > 0 {
		why = append(why, fmt.Sprintf("%d requests have no outcome at all (ids %v)", len(a.NoOutcome), FirstN(a.NoOutcome, 10)))
	}
	if len(a.Doubles) > 0 {
		why = append(why, fmt.Sprintf("%d second outcomes: %v", len(a.Doubles), FirstN(a.Doubles, 5)))
	}
	if n := a.Outcomes[ledger.OutcomeAborted]; n > 0 {
		why = append(why, fmt.Sprintf("%d requests were cut short because the load test was interrupted", n))
	}
	c.Status, c.Detail = verdict(len(why) == 0 && a.OK()), strings.Join(why, "; ")
	return c
}

func evalHop(r, base *RunReport, b config.Bars) []Criterion {
	if r.Instances == 1 {
		return nil
	}
	c95 := Criterion{Instances: r.Instances, Name: CritHopP95, Bar: fmt.Sprintf("≤ %.0f ms vs 1 instance", stats.Ms(b.HopP95))}
	c99 := Criterion{Instances: r.Instances, Name: CritHopP99, Bar: fmt.Sprintf("≤ %.0f ms vs 1 instance", stats.Ms(b.HopP99))}
	switch {
	case base == nil:
		c95.Status, c95.Figure = Skip, "no 1-instance run to compare with (add 1 to --instances)"
		c99.Status, c99.Figure = Skip, c95.Figure
		return []Criterion{c95, c99}
	case base.Overhead.N == 0 || r.Overhead.N == 0:
		c95.Status, c95.Figure = Fail, fmt.Sprintf("no successful steady plain requests to compare (%d here, %d in the 1-instance run)", r.Overhead.N, base.Overhead.N)
		c99.Status, c99.Figure = Fail, c95.Figure
		return []Criterion{c95, c99}
	}
	add95, add99 := r.Overhead.P95-base.Overhead.P95, r.Overhead.P99-base.Overhead.P99
	c95.Figure = fmt.Sprintf("%+.2f ms (overhead p95 %.2f vs %.2f ms)", add95, r.Overhead.P95, base.Overhead.P95)
	c99.Figure = fmt.Sprintf("%+.2f ms (overhead p99 %.2f vs %.2f ms)", add99, r.Overhead.P99, base.Overhead.P99)
	c95.Status, c99.Status = verdict(add95 <= stats.Ms(b.HopP95)), verdict(add99 <= stats.Ms(b.HopP99))
	if c95.Status == Fail {
		c95.Detail = fmt.Sprintf("missed by %.2f ms", add95-stats.Ms(b.HopP95))
	}
	if c99.Status == Fail {
		c99.Detail = fmt.Sprintf("missed by %.2f ms", add99-stats.Ms(b.HopP99))
	}
	return []Criterion{c95, c99}
}

func evalCPU(r *RunReport, b config.Bars) Criterion {
	c := Criterion{Instances: r.Instances, Name: CritCPU, Bar: fmt.Sprintf("< %g%% of one core at 100 requests/s", b.CPUPercent)}
	if len(r.Resources) == 0 {
		c.Status, c.Figure = Skip, "not measured: CPU and RSS are read from /proc only for instances this program started"
		return c
	}
	worst := r.Resources[0]
	for _, res := range r.Resources[1:] {
		if res.CPUScaled > worst.CPUScaled {
			worst = res
		}
	}
	c.Figure = fmt.Sprintf("%.1f%% (%s: mean %.1f%% over the steady phase", worst.CPUScaled, worst.Name, worst.CPUMean)
	if r.Rate != 100 {
		c.Figure += fmt.Sprintf(" at %g requests/s, × 100/%g", r.Rate, r.Rate)
	}
	c.Figure += ")"
	c.Status = verdict(worst.CPUScaled < b.CPUPercent)
	if c.Status == Fail {
		c.Detail = fmt.Sprintf("%s over the bar by %.1f points", worst.Name, worst.CPUScaled-b.CPUPercent)
	}
	return c
}

func evalMemory(r *RunReport, b config.Bars) Criterion {
	c := Criterion{Instances: r.Instances, Name: CritMemory, Bar: fmt.Sprintf("< %g%% RSS growth", 100*b.MemGrowth)}
	if len(r.Resources) == 0 {
		c.Status, c.Figure = Skip, "not measured: CPU and RSS are read from /proc only for instances this program started"
		return c
	}
	var worst *Resources
	for i := range r.Resources {
		res := &r.Resources[i]
		if res.MemJudged && (worst == nil || res.MemGrowth > worst.MemGrowth) {
			worst = res
		}
	}
	if worst == nil {
		c.Status, c.Figure = Skip, "every steady stretch was shorter than --mem-min-stretch: too short to tell a leak from warm-up"
		return c
	}
	c.Figure = fmt.Sprintf("%+.2f%% (%s; end vs start of steady %d → %d KiB)", 100*worst.MemGrowth, worst.Name, worst.RSSStart, worst.RSSEnd)
	c.Status = verdict(worst.MemGrowth < b.MemGrowth)
	if c.Status == Fail {
		c.Detail = fmt.Sprintf("%s grew %.2f points over the bar", worst.Name, 100*(worst.MemGrowth-b.MemGrowth))
	}
	return c
}

// evalFault judges the fault's own criterion (a kill's 502s, or a drain
// that loses nothing) and that every other request succeeded.
func evalFault(r *RunReport, b config.Bars) []Criterion {
	f := r.Fault
	others := Criterion{Instances: r.Instances, Name: CritUnaffect, Bar: "every request not on the faulty instance succeeds"}
	if f.Kind == config.FaultNone || f.Skipped != "" {
		others.Bar = "every request succeeds (no fault here)"
	}
	var bad []*ledger.Record
	n := 0
	for _, rec := range r.Records {
		if rec.Class == ClassOther {
			n++
			if rec.Outcome != ledger.OutcomeOK {
				bad = append(bad, rec)
			}
		}
	}
	others.Figure = fmt.Sprintf("%d of %d not ok", len(bad), n)
	others.Status = verdict(len(bad) == 0)
	if len(bad) > 0 {
		others.Detail = describe(bad, f)
	}

	var fc Criterion
	switch {
	case f.Kind == config.FaultNone:
		return []Criterion{others}
	case f.Skipped != "":
		name := CritFault
		if f.Kind == config.FaultSIGTERM {
			name = CritDrain
		}
		fc = Criterion{Instances: r.Instances, Name: name, Bar: "-", Status: Skip, Figure: "fault skipped: " + f.Skipped}
	case f.Kind == config.FaultKill:
		fc = evalKill(r, b)
	default:
		fc = evalDrain(r)
	}
	return []Criterion{fc, others}
}

func evalKill(r *RunReport, b config.Bars) Criterion {
	f := r.Fault
	bar := stats.Ms(b.FaultToFail)
	c := Criterion{Instances: r.Instances, Name: CritFault,
		Bar: fmt.Sprintf("each runs again on another node (200), or gets 502 node_disconnected within %.1f s of the kill", bar/1000)}
	// Judged: every victim task, and every in-transit task that did not
	// come back with its result.
	var judged, bad []*ledger.Record
	victims := 0
	for _, rec := range r.Records {
		switch {
		case rec.Class == ClassVictimTask:
			victims++
			judged = append(judged, rec)
		case rec.Class == ClassInTransit && rec.Outcome != ledger.OutcomeOK:
			judged = append(judged, rec)
		}
	}
	if victims == 0 {
		c.Status = Fail
		c.Figure = "no task was running on the killed instance's nodes for another instance's request at the kill"
		c.Detail = fmt.Sprintf("nothing to prove (%d such tasks at the signal): raise --rate or --streams", f.InFlight)
		return c
	}
	slowest, retried, failed := 0.0, 0, 0
	for _, rec := range judged {
		took := rec.DoneMs - f.AtMs
		slowest = max(slowest, took)
		switch {
		case rec.Outcome == ledger.OutcomeOK && rec.Attempts > 1:
			retried++
		case rec.Outcome == ledger.OutcomeError && rec.Code == "node_disconnected" && took <= bar:
			failed++
		default:
			bad = append(bad, rec)
		}
	}
	c.Figure = fmt.Sprintf("%d of %d in-flight tasks as the bar says (%d ran again on another node and succeeded, %d got 502 node_disconnected within %.1f s); slowest outcome %.0f ms after the kill",
		retried+failed, len(judged), retried, failed, bar/1000, slowest)
	c.Status = verdict(len(bad) == 0)
	if len(bad) > 0 {
		c.Detail = describe(bad, f)
	}
	return c
}

func evalDrain(r *RunReport) Criterion {
	f := r.Fault
	c := Criterion{Instances: r.Instances, Name: CritDrain, Bar: "tasks in flight on the draining instance finish; it exits 0"}
	var in, bad []*ledger.Record
	for _, rec := range r.Records {
		if rec.Class == ClassDrainRequester || rec.Class == ClassDrainTask {
			in = append(in, rec)
			if rec.Outcome != ledger.OutcomeOK {
				bad = append(bad, rec)
			}
		}
	}
	exit := f.ExitErr
	if exit == "" {
		exit = "had not exited by the end of the run"
	}
	c.Figure = fmt.Sprintf("%d of %d in-flight requests succeeded; exit %.1f s after SIGTERM (%s)", len(in)-len(bad), len(in), (f.ExitMs-f.AtMs)/1000, exit)
	if f.ExitMs == 0 {
		c.Figure = fmt.Sprintf("%d of %d in-flight requests succeeded; the instance %s", len(in)-len(bad), len(in), exit)
	}
	c.Status = verdict(len(bad) == 0 && f.ExitErr == "exit status 0")
	if len(bad) > 0 {
		c.Detail = describe(bad, f)
	}
	return c
}

func evalInstances(r *RunReport) Criterion {
	c := Criterion{Instances: r.Instances, Name: CritInstances, Bar: "no instance exits unless signalled"}
	if len(r.Members) == 0 || r.Members[0].PID == 0 {
		c.Status, c.Figure = Skip, "not known for --target instances"
		return c
	}
	var died []string
	for _, e := range r.Events {
		if strings.Contains(e.What, "exited unexpectedly") {
			died = append(died, e.What)
		}
	}
	c.Figure = fmt.Sprintf("%d exited unexpectedly", len(died))
	c.Status = verdict(len(died) == 0)
	c.Detail = strings.Join(died, "; ")
	return c
}

// describe summarises failed records by outcome and timing.
func describe(bad []*ledger.Record, f FaultReport) string {
	type agg struct {
		n          int
		minT, maxT float64
		example    *ledger.Record
	}
	groups := map[string]*agg{}
	var keys []string
	for _, rec := range bad {
		k := rec.Class + ": " + errorKey(rec)
		if rec.Outcome == ledger.OutcomeOK {
			k = rec.Class + ": ok"
		}
		g, ok := groups[k]
		if !ok {
			g = &agg{minT: rec.DoneMs, maxT: rec.DoneMs, example: rec}
			groups[k] = g
			keys = append(keys, k)
		}
		g.n++
		g.minT, g.maxT = min(g.minT, rec.DoneMs), max(g.maxT, rec.DoneMs)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		g := groups[k]
		when := fmt.Sprintf("at %.2f–%.2f s", g.minT/1000, g.maxT/1000)
		if f.AtMs > 0 {
			when = fmt.Sprintf("%.0f to %.0f ms after the fault", g.minT-f.AtMs, g.maxT-f.AtMs)
		}
		ex := g.example
		node := "no node started it"
		if ex.NodeInst >= 0 {
			node = fmt.Sprintf("node %d on instance %d", ex.Node, ex.NodeInst+1)
		}
		parts = append(parts, fmt.Sprintf("%d × %s, %s (e.g. request %d sent to instance %d, %s: %q)",
			g.n, k, when, ex.ID, ex.Via+1, node, ex.Message))
	}
	return strings.Join(parts, "; ")
}

func verdict(ok bool) string {
	if ok {
		return Pass
	}
	return Fail
}

func evalIdleCPU(r *RunReport, b config.Bars) Criterion {
	f := r.Fleet
	c := Criterion{Instances: r.Instances, Name: CritIdleCPU,
		Bar: fmt.Sprintf("< %g%% of one core, the busiest instance, %d nodes and no requests", b.IdleCPUPercent, f.Nodes)}
	w := f.Idle
	switch {
	case !w.Measured:
		c.Status, c.Figure = Fail, "the idle window was not measured: the run ended before it did"
		return c
	case len(w.Instances) == 0:
		c.Status, c.Figure = Skip, "not measured: CPU is read from /proc only for instances this program started"
		return c
	}
	busy, ok := w.Busy()
	if !ok {
		c.Status, c.Figure = Fail, "no instance ran through the idle window"
		return c
	}
	var others []string
	for _, in := range w.Instances {
		if in.Index != busy.Index {
			others = append(others, fmt.Sprintf("%.2f%%", in.CPUMean))
		}
	}
	c.Figure = fmt.Sprintf("%.2f%% (instance %d, %s: mean over %.0f s", busy.CPUMean, busy.Index+1, busy.Name, w.ToS-w.FromS)
	if len(others) > 0 {
		c.Figure += "; the others " + strings.Join(others, ", ")
	}
	c.Figure += ")"
	c.Status = verdict(busy.CPUMean < b.IdleCPUPercent)
	if c.Status == Fail {
		c.Detail = fmt.Sprintf("instance %d over the bar by %.2f points with %d nodes idle", busy.Index+1, busy.CPUMean-b.IdleCPUPercent, f.Nodes)
	}
	if n := w.Sent; n > 0 {
		c.Status, c.Detail = Fail, fmt.Sprintf("%d requests were sent during the idle window", n)
	}
	return c
}

func evalIdleRedis(r *RunReport, b config.Bars) Criterion {
	f := r.Fleet
	c := Criterion{Instances: r.Instances, Name: CritIdleRedis,
		Bar: fmt.Sprintf("< %g commands/s, every Redis server together, %d nodes and no requests", b.IdleRedisOps, f.Nodes)}
	w := f.Idle
	switch {
	case !w.Measured:
		c.Status, c.Figure = Fail, "the idle window was not measured: the run ended before it did"
		return c
	case !w.Redis.Measured && len(w.Instances) == 0:
		c.Status, c.Figure = Skip, w.Redis.Error
		return c
	case !w.Redis.Measured:
		c.Status, c.Figure = Fail, "INFO stats could not be read: "+w.Redis.Error
		return c
	}
	c.Figure = fmt.Sprintf("%.0f commands/s (%d commands over %.0f s on %d server%s", w.Redis.PerSec, w.Redis.Commands,
		w.ToS-w.FromS, w.Redis.Servers, Plural(w.Redis.Servers))
	if f.RedisShared {
		c.Figure += "; a shared Redis: other clients' commands count too"
	}
	c.Figure += ")"
	c.Status = verdict(w.Redis.PerSec < b.IdleRedisOps)
	if c.Status == Fail {
		c.Detail = fmt.Sprintf("%.0f commands/s over the bar", w.Redis.PerSec-b.IdleRedisOps)
		if f.RedisShared {
			c.Detail += " (check that nothing else was using that Redis, or run with --redis-cluster)"
		}
	}
	return c
}
