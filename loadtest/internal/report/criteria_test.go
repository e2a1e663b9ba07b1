package report

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
)

// testCfg is a configuration for judging synthetic runs.
func testCfg() config.Config {
	c := config.Config{Instances: []int{1, 2}, Nodes: 4, HandlerMax: time.Millisecond, Rate: 100, Duration: 100 * time.Second, Fault: config.FaultKill}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c.WithDefaults()
}

// steadyRun is a run of n instances whose plain requests all succeeded
// with the given overheads, sent one every 100 ms from the steady start
// (10 s); fault as given; and flat resources.
func steadyRun(n int, overheads []float64, f FaultReport, extra ...*ledger.Record) *RunReport {
	var recs []*ledger.Record
	for i, o := range overheads {
		sent := 10000 + float64(i)*100
		r := &ledger.Record{ID: int64(len(recs)), Kind: ledger.KindPlain, Phase: ledger.PhaseSteady, Via: i % n, SentMs: sent,
			DoneMs: sent + 100 + o, Outcome: ledger.OutcomeOK, ProcMs: 100, LatencyMs: 100 + o, OverheadMs: o,
			Node: i, NodeInst: (i + 1) % n, StartMs: sent + 1, EndMs: sent + 99}
		recs = append(recs, r)
	}
	for _, r := range extra {
		r.ID = int64(len(recs))
		recs = append(recs, r)
	}
	insts := make([]*cluster.Instance, n)
	samples := make([][]cluster.Sample, n)
	for i := range insts {
		insts[i] = &cluster.Instance{Index: i, Name: "i" + string(rune('1'+i)), PID: 100 + i}
		for s := 0; s <= 120; s++ {
			samples[i] = append(samples[i], cluster.Sample{T: float64(s), CPU: 5, RSSKiB: 30000})
		}
	}
	ph := Phases{SteadyStart: 10, SteadyEnd: 110, End: 111}
	return BuildRun(testCfg(), insts, recs, nil, f, ph, nil, samples, nil, 0)
}

func find(t *testing.T, cs []Criterion, inst int, name string) Criterion {
	t.Helper()
	for _, c := range cs {
		if c.Instances == inst && c.Name == name {
			return c
		}
	}
	t.Fatalf("no criterion %q for %d instances in %+v", name, inst, cs)
	return Criterion{}
}

func flat(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestEvaluateHop(t *testing.T) {
	base := steadyRun(1, flat(200, 1), FaultReport{Kind: config.FaultNone})
	good := steadyRun(2, flat(200, 2.5), FaultReport{Kind: config.FaultNone})
	badTail := flat(200, 1.5)
	badTail[10], badTail[20], badTail[30] = 30, 30, 30 // 1.5% of requests slow: p99 30 ms
	bad := steadyRun(3, badTail, FaultReport{Kind: config.FaultNone})

	cs := Evaluate([]*RunReport{base, good, bad}, config.DefaultBars)
	if c := find(t, cs, 2, CritHopP95); c.Status != Pass || !strings.Contains(c.Figure, "+1.50 ms") {
		t.Errorf("2 instances p95: %+v", c)
	}
	if c := find(t, cs, 3, CritHopP95); c.Status != Pass {
		t.Errorf("3 instances p95: %+v", c)
	}
	c := find(t, cs, 3, CritHopP99)
	if c.Status != Fail || !strings.Contains(c.Figure, "+29.00 ms") || !strings.Contains(c.Detail, "missed by 24.00 ms") {
		t.Errorf("3 instances p99 should fail with its figure: %+v", c)
	}
	if Passed(cs) {
		t.Error("Passed with a failed criterion")
	}

	alone := Evaluate([]*RunReport{good}, config.DefaultBars)
	if c := find(t, alone, 2, CritHopP95); c.Status != Skip {
		t.Errorf("without a 1-instance run the hop cannot be judged: %+v", c)
	}
}

func TestEvaluateCPUScalesToTheRate(t *testing.T) {
	run := steadyRun(1, flat(50, 1), FaultReport{Kind: config.FaultNone})
	run.Rate = 25
	for i := range run.Resources {
		run.Resources[i].CPUScaled = run.Resources[i].CPUMean * 100 / run.Rate // 5% at 25/s is 20% at 100/s
	}
	c := evalCPU(run, config.DefaultBars)
	if c.Status != Fail || !strings.Contains(c.Figure, "20.0%") || !strings.Contains(c.Figure, "× 100/25") {
		t.Errorf("CPU: %+v", c)
	}
	run.Resources = nil
	if c := evalCPU(run, config.DefaultBars); c.Status != Skip {
		t.Errorf("no samples (target mode) should skip: %+v", c)
	}
}

func TestEvaluateMemory(t *testing.T) {
	run := steadyRun(1, flat(50, 1), FaultReport{Kind: config.FaultNone})
	if c := evalMemory(run, config.DefaultBars); c.Status != Pass {
		t.Errorf("flat RSS: %+v", c)
	}
	// A leak: RSS rises 10% across the steady phase.
	insts := run.Members
	var s []cluster.Sample
	for i := 0; i <= 120; i++ {
		s = append(s, cluster.Sample{T: float64(i), RSSKiB: 30000 + int64(i)*30})
	}
	res := resourcesOf(testCfg(), insts[0], s, run.Phases, run.Fault, false, 0, 0)
	run.Resources = []Resources{res}
	c := evalMemory(run, config.DefaultBars)
	if c.Status != Fail || !strings.Contains(c.Figure, "%") || c.Detail == "" {
		t.Errorf("a leak must fail with its figure: %+v", c)
	}

	// A stretch shorter than MemMinStretch is printed but not judged.
	short := testCfg()
	short.MemMinStretch = time.Hour
	run.Resources = []Resources{resourcesOf(short, insts[0], s, run.Phases, run.Fault, false, 0, 0)}
	if c := evalMemory(run, config.DefaultBars); c.Status != Skip {
		t.Errorf("too short a stretch should skip: %+v", c)
	}
}

func TestMemorySegmentsLeaveOutTheFault(t *testing.T) {
	// RSS jumps when the victim's nodes move in at 60 s, flat otherwise:
	// no growth within either stretch.
	var s []cluster.Sample
	for i := 0; i <= 120; i++ {
		rss := int64(30000)
		if i >= 61 {
			rss = 33000
		}
		s = append(s, cluster.Sample{T: float64(i), RSSKiB: rss})
	}
	f := FaultReport{Kind: config.FaultKill, Instance: 1, AtMs: 60000}
	from, to, _ := faultWindow(f, 5000)
	res := resourcesOf(testCfg(), &cluster.Instance{Index: 0, Name: "survivor"}, s, Phases{SteadyStart: 0, SteadyEnd: 120}, f, true, from/1000, to/1000)
	if len(res.Segments) != 2 || !res.MemJudged || res.MemGrowth != 0 {
		t.Errorf("segments %+v, growth %g", res.Segments, res.MemGrowth)
	}
	victim := resourcesOf(testCfg(), &cluster.Instance{Index: 1, Name: "victim"}, s[:60], Phases{SteadyStart: 0, SteadyEnd: 120}, f, true, from/1000, to/1000)
	if len(victim.Segments) != 1 {
		t.Errorf("the killed instance has one stretch, before the kill: %+v", victim.Segments)
	}
}

func TestEvaluateKill(t *testing.T) {
	f := FaultReport{Kind: config.FaultKill, Instance: 1, AtMs: 30000, InFlight: 2}
	fast := []*ledger.Record{
		mk(0, 0, 29900, 30480, ledger.OutcomeError, "node_disconnected", 1, 29905, 30000.3),
		mk(0, 0, 29950, 30520, ledger.OutcomeError, "node_disconnected", 1, 29955, 30001),
		mk(0, 1, 29950, 30002, ledger.OutcomeError, ledger.CodeTransport, 0, 29955, 30100),
	}
	run := steadyRun(2, flat(100, 1), f, fast...)
	cs := Evaluate([]*RunReport{run}, config.DefaultBars)
	c := find(t, cs, 2, CritFault)
	if c.Status != Pass || !strings.Contains(c.Figure, "2 of 2") || !strings.Contains(c.Figure, "520 ms") {
		t.Errorf("kill: %+v", c)
	}
	if c := find(t, cs, 2, CritUnaffect); c.Status != Pass {
		t.Errorf("others: %+v", c)
	}

	// Without the watcher: the tasks wait for their deadline and end 504.
	slow := []*ledger.Record{
		mk(0, 0, 29900, 34000, ledger.OutcomeError, "timeout", 1, 29905, 30000),
		mk(0, 0, 29950, 30400, ledger.OutcomeError, "node_disconnected", 1, 29955, 30001),
	}
	slow[0].Status = 504
	run = steadyRun(2, flat(100, 1), f, slow...)
	c = find(t, Evaluate([]*RunReport{run}, config.DefaultBars), 2, CritFault)
	if c.Status != Fail || !strings.Contains(c.Figure, "1 of 2") || !strings.Contains(c.Figure, "4000 ms") ||
		!strings.Contains(c.Detail, "504 timeout") {
		t.Errorf("a 504 after 4 s must fail the kill criterion with its figure: %+v", c)
	}

	// With another node to take them: the tasks run again and succeed,
	// however long that takes; an answer that does not say it ran again
	// (its victim node cannot have given it) fails.
	again := []*ledger.Record{
		mk(0, 0, 29900, 32400, ledger.OutcomeOK, "", 0, 31000, 32390), // started again on instance 0
		mk(0, 0, 29950, 31000, ledger.OutcomeOK, "", 1, 29955, 30990), // its answer says no retry
	}
	again[0].Attempts, again[0].Earlier = 2, []int{1}
	run = steadyRun(2, flat(100, 1), f, again...)
	c = find(t, Evaluate([]*RunReport{run}, config.DefaultBars), 2, CritFault)
	if c.Status != Fail || !strings.Contains(c.Figure, "1 of 2 in-flight tasks as the bar says (1 ran again") {
		t.Errorf("one retried, one ok without a retry: %+v", c)
	}
	again[1].Attempts = 2
	run = steadyRun(2, flat(100, 1), f, again...)
	if c := find(t, Evaluate([]*RunReport{run}, config.DefaultBars), 2, CritFault); c.Status != Pass || !strings.Contains(c.Figure, "2 of 2") {
		t.Errorf("both retried: %+v", c)
	}

	// Nothing in flight on the victim: nothing proven.
	run = steadyRun(2, flat(100, 1), f)
	if c := find(t, Evaluate([]*RunReport{run}, config.DefaultBars), 2, CritFault); c.Status != Fail {
		t.Errorf("no victim task: %+v", c)
	}

	// Skipped on one instance.
	run = steadyRun(1, flat(100, 1), FaultReport{Kind: config.FaultKill, Skipped: "a 1-instance run has no other instance to fail over to"})
	if c := find(t, Evaluate([]*RunReport{run}, config.DefaultBars), 1, CritFault); c.Status != Skip || !strings.Contains(c.Figure, "fail over") {
		t.Errorf("1 instance: %+v", c)
	}
}

func TestEvaluateOthersAndLost(t *testing.T) {
	f := FaultReport{Kind: config.FaultKill, Instance: 1, AtMs: 30000, InFlight: 1}
	extra := []*ledger.Record{
		mk(0, 0, 29900, 30480, ledger.OutcomeError, "node_disconnected", 1, 29905, 30000.3),
		mk(0, 0, 30300, 30301, ledger.OutcomeError, "no_node_available", -1, 0, 0),
		mk(0, 0, 30310, 92310, ledger.OutcomeLost, "", 0, 30311, 0),
	}
	extra[1].Status = 404
	run := steadyRun(2, flat(100, 1), f, extra...)
	cs := Evaluate([]*RunReport{run}, config.DefaultBars)
	c := find(t, cs, 2, CritUnaffect)
	if c.Status != Fail || !strings.Contains(c.Figure, "2 of 102") || !strings.Contains(c.Detail, "404 no_node_available") {
		t.Errorf("others: %+v", c)
	}
	c = find(t, cs, 2, CritLost)
	if c.Status != Fail || !strings.Contains(c.Figure, "1 lost of 103") {
		t.Errorf("lost: %+v", c)
	}
	if find(t, cs, 2, CritFault).Status != Pass {
		t.Error("the victim task was fine")
	}
}

func TestEvaluateDrain(t *testing.T) {
	f := FaultReport{Kind: config.FaultSIGTERM, Instance: 1, AtMs: 30000, ExitMs: 31200, ExitErr: "exit status 0"}
	extra := []*ledger.Record{mk(0, 1, 29900, 30300, ledger.OutcomeOK, "", 1, 29905, 30290)}
	run := steadyRun(2, flat(100, 1), f, extra...)
	if c := find(t, Evaluate([]*RunReport{run}, config.DefaultBars), 2, CritDrain); c.Status != Pass || !strings.Contains(c.Figure, "1 of 1") {
		t.Errorf("drain: %+v", c)
	}
	extra = []*ledger.Record{mk(0, 1, 29900, 30010, ledger.OutcomeError, ledger.CodeTransport, 1, 29905, 30290)}
	run = steadyRun(2, flat(100, 1), f, extra...)
	if c := find(t, Evaluate([]*RunReport{run}, config.DefaultBars), 2, CritDrain); c.Status != Fail {
		t.Errorf("a drain that dropped a request: %+v", c)
	}
}
