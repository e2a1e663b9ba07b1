package report

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// sweepRow is a step's row with every request sent and answered ok, and
// the given p99.
func sweepRow(mode string, rate, p99 float64) SweepRow {
	n := int(rate * 10)
	return SweepRow{Mode: mode, Rate: rate, Expected: n, Sent: n, OK: n, NonOK: map[string]int{}, MaxInFlight: 10,
		Latency: stats.Dist{N: n, P50: p99 / 4, P95: p99 / 2, P99: p99, Max: 2 * p99}}
}

// failing marks bad of r's requests as not ok (timeouts).
func failing(r SweepRow, bad int) SweepRow {
	r.OK, r.Timeouts, r.Latency.N = r.OK-bad, bad, r.Latency.N-bad
	r.NonOK = map[string]int{"timeout": bad}
	return r
}

func TestSweepKnee(t *testing.T) {
	rows := []SweepRow{
		sweepRow(config.ModeNATS, 1000, 0.4), sweepRow(config.ModeNATS, 5000, 0.9),
		sweepRow(config.ModeLocal, 1000, 2), sweepRow(config.ModeLocal, 2500, 10), sweepRow(config.ModeLocal, 5000, 10.01), sweepRow(config.ModeLocal, 10000, 50),
		sweepRow(config.ModeCross, 1000, 3), failing(sweepRow(config.ModeCross, 2500, 4), 251), sweepRow(config.ModeCross, 5000, 4),
		sweepRow("other", 1000, 1), failing(sweepRow("other", 2500, 1), 250), // 250 of 25,000: exactly 1 %
	}
	for mode, want := range map[string]float64{
		config.ModeNATS:  0,    // never past 10 ms
		config.ModeLocal: 5000, // 10 ms is not past 10 ms; 10.01 is
		config.ModeCross: 2500, // more than 1 % failed: its p99 is a failure
		"other":          0,    // 1 % failed: the p99 is still an answer
		"absent":         0,
	} {
		if got := sweepKnee(rows, mode, 10); got != want {
			t.Errorf("knee of %s: %g, want %g", mode, got, want)
		}
	}
	// A step with no answers at all has no p99.
	if got := sweepKnee([]SweepRow{failing(sweepRow(config.ModeLocal, 100, 1), 1000)}, config.ModeLocal, 10); got != 100 {
		t.Errorf("knee of a step with no answers: %g", got)
	}
}

// sweepReport is a sweep that clears every bar of the sweep profile.
func sweepReport() *SweepReport {
	s := &SweepReport{Modes: []string{config.ModeNATS, config.ModeLocal, config.ModeCross}, Rates: []float64{1000, 2500, 5000, 10000},
		WarmupS: 1, CountedS: 10, Nodes: 20, NodeConcurrency: 4, LateMs: 10, KneeMs: 10, NATSClient: "one shared client connection (from each request's goroutine)",
		Members: map[string][]*cluster.Instance{config.ModeLocal: {{Name: "l-1", PID: 1}}, config.ModeCross: {{Name: "c-1", PID: 2}, {Index: 1, Name: "c-2", PID: 3}}}}
	for i, r := range s.Rates {
		s.Rows = append(s.Rows, sweepRow(config.ModeNATS, r, 0.5+float64(i)))
	}
	for i, r := range s.Rates {
		s.Rows = append(s.Rows, sweepRow(config.ModeLocal, r, 0.9+2*float64(i)))
	}
	for i, r := range s.Rates {
		s.Rows = append(s.Rows, sweepRow(config.ModeCross, r, []float64{1, 4, 10.5, 14}[i]))
	}
	s.Finish()
	return s
}

func TestEvaluateSweep(t *testing.T) {
	find := func(cs []Criterion, name string) Criterion {
		t.Helper()
		for _, c := range cs {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no criterion %q in %+v", name, cs)
		return Criterion{}
	}
	s := sweepReport()
	cs := EvaluateSweep(s, config.DefaultBars)
	if !Passed(cs) {
		t.Fatalf("a sweep under every bar failed: %+v", cs)
	}
	// local 5000: p99 4.9 vs NATS 2.5 → 1.96×; cross 2500: 4 vs 1.5 → 2.67×.
	if c := find(cs, CritSweepLocal); c.Status != Pass || !strings.Contains(c.Figure, "1.96×") || c.Scope != "5000/s" {
		t.Errorf("local: %+v", c)
	}
	for _, name := range []string{CritSweepOutcomes, CritSweepSchedule, CritInstances} {
		if c := find(cs, name); c.Status != Pass {
			t.Errorf("%s: %+v", name, c)
		}
	}
	if c := find(cs, CritSweepCross); c.Status != Pass || !strings.Contains(c.Figure, "2.67×") || c.Scope != "2500/s" {
		t.Errorf("cross: %+v", c)
	}

	for _, tc := range []struct {
		name  string
		edit  func(s *SweepReport)
		crit  string
		want  string
		words string // in the figure or detail
	}{
		{"local over 2×", func(s *SweepReport) { s.row(config.ModeLocal, 5000).Latency.P99 = 5.01 }, CritSweepLocal, Fail, "over the bar"},
		{"local at 2× exactly", func(s *SweepReport) { s.row(config.ModeLocal, 5000).Latency.P99 = 5 }, CritSweepLocal, Pass, "2.00×"},
		{"cross over 3×", func(s *SweepReport) { s.row(config.ModeCross, 2500).Latency.P99 = 4.6 }, CritSweepCross, Fail, "over the bar"},
		{"cross under 3× with a few failures", func(s *SweepReport) { *s.row(config.ModeCross, 2500) = failing(*s.row(config.ModeCross, 2500), 3) },
			CritSweepCross, Pass, "3 requests not ok, left out"},
		{"cross with over 1 % failures", func(s *SweepReport) { *s.row(config.ModeCross, 2500) = failing(*s.row(config.ModeCross, 2500), 300) },
			CritSweepCross, Fail, "p99 of the requests sent is a failure"},
		{"a NATS baseline that failed", func(s *SweepReport) { *s.row(config.ModeNATS, 5000) = failing(*s.row(config.ModeNATS, 5000), 1) },
			CritSweepLocal, Fail, "baseline itself"},
		{"no NATS step", func(s *SweepReport) {
			s.Rows = slices.DeleteFunc(s.Rows, func(r SweepRow) bool { return r.Mode == config.ModeNATS })
		},
			CritSweepLocal, Skip, "add nats to --modes"},
		{"no local step at 5000", func(s *SweepReport) {
			s.Rows = slices.DeleteFunc(s.Rows, func(r SweepRow) bool { return r.Mode == config.ModeLocal && r.Rate == 5000 })
		}, CritSweepLocal, Skip, "did not run"},
		{"one late request", func(s *SweepReport) {
			s.row(config.ModeCross, 5000).Late, s.row(config.ModeCross, 5000).MaxLagMs = 1, 12.5
		},
			CritSweepSchedule, Fail, "1 late (worst lag 12.5 ms)"},
		{"one error", func(s *SweepReport) {
			r := s.row(config.ModeCross, 5000)
			r.OK, r.Errors, r.NonOK = r.OK-1, 1, map[string]int{"503 nodes_busy": 1}
		}, CritSweepSchedule, Fail, "503 nodes_busy ×1"},
		{"one timeout", func(s *SweepReport) { *s.row(config.ModeCross, 5000) = failing(*s.row(config.ModeCross, 5000), 1) },
			CritSweepSchedule, Fail, "timeout ×1"},
		{"fewer sent than due", func(s *SweepReport) { r := s.row(config.ModeCross, 5000); r.Sent, r.OK = r.Sent-1, r.OK-1 },
			CritSweepSchedule, Fail, "49999 of 50000 due sent"},
		{"no cross step at 5000", func(s *SweepReport) {
			s.Rates = s.Rates[:2]
			s.Rows = slices.DeleteFunc(s.Rows, func(r SweepRow) bool { return r.Rate > 2500 })
		},
			CritSweepSchedule, Skip, "did not run"},
		{"the floor under the local bar", func(s *SweepReport) {
			s.Rows = append(s.Rows, sweepRow(config.ModeFloor, 5000, 3))
			s.row(config.ModeLocal, 5000).Latency.P99 = 6
		}, CritSweepLocal, Fail, "the floor (a bare forwarder, same client and nodes): p99 3.00 ms, 1.20× NATS"},
		{"the floor itself over the local bar", func(s *SweepReport) {
			s.Rows = append(s.Rows, sweepRow(config.ModeFloor, 5000, 6))
			s.row(config.ModeLocal, 5000).Latency.P99 = 7
		}, CritSweepLocal, Fail, "p99 6.00 ms, 2.40× NATS, itself over the bar"},
		{"local collapsed beside the floor", func(s *SweepReport) {
			s.Rows = append(s.Rows, sweepRow(config.ModeFloor, 5000, 6))
			*s.row(config.ModeLocal, 5000) = failing(*s.row(config.ModeLocal, 5000), 5000)
		}, CritSweepLocal, Fail, "itself over the bar"},
		{"an outcome missing", func(s *SweepReport) { s.row(config.ModeLocal, 1000).NoOutcome = 1 }, CritSweepOutcomes, Fail, "1 without an outcome"},
		{"the counts disagree", func(s *SweepReport) { s.row(config.ModeNATS, 1000).OK-- }, CritSweepOutcomes, Fail, "nats at 1000/s"},
		{"an instance died", func(s *SweepReport) { s.Exited = []string{"c-2 exited"} }, CritInstances, Fail, "c-2 exited"},
		{"nats only", func(s *SweepReport) { s.Members = nil }, CritInstances, Skip, "no switchyard mode"},
	} {
		s := sweepReport()
		tc.edit(s)
		c := find(EvaluateSweep(s, config.DefaultBars), tc.crit)
		if c.Status != tc.want || !strings.Contains(c.Figure+" "+c.Detail, tc.words) {
			t.Errorf("%s: %s %q, want %s with %q", tc.name, c.Status, c.Figure+" / "+c.Detail, tc.want, tc.words)
		}
	}

	// The floor is one instance's path: the cross bar does not cite it.
	s = sweepReport()
	s.Rows = append(s.Rows, sweepRow(config.ModeFloor, 2500, 20))
	s.row(config.ModeCross, 2500).Latency.P99 = 30
	if c := find(EvaluateSweep(s, config.DefaultBars), CritSweepCross); c.Status != Fail || strings.Contains(c.Detail, "floor") {
		t.Errorf("cross over the bar beside a floor row: %s %q", c.Status, c.Detail)
	}
}

func TestSweepReportTextAndJSON(t *testing.T) {
	s := sweepReport()
	r := s.row(config.ModeLocal, 10000)
	r.MaxInFlight, r.OK, r.Errors, r.NonOK = 80, r.OK-7, 7, map[string]int{"503 nodes_busy": 7}
	r.Examples = map[string]string{"503 nodes_busy": "every node that can run this task type is busy"}
	r.Latency.P99 = 25
	s.Finish()
	cfg, err := config.ForProfile("sweep")
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Tool: "switchyard loadtest", Profile: "sweep", Mode: "spawn", Shape: cfg.WithDefaults().Summary(), Sweep: s}
	rep.Criteria = EvaluateSweep(s, config.DefaultBars)
	rep.Pass = Passed(rep.Criteria)
	rep.Notes = s.Notes()
	var buf bytes.Buffer
	rep.WriteText(&buf)
	out := buf.String()
	for _, want := range []string{
		"timeouts", "max lag ms", "max in flight", "new conns",
		"p99/NATS", "1.96×", // local at 5000
		"p99 passes 10 ms at: nats none; local 10000/s; cross 5000/s",
		"local at 10000/s, not ok: 503 nodes_busy ×7",
		"e.g. 503 nodes_busy: every node that can run this task type is busy",
		"may be the limit of: local at 10000/s (up to 80 in flight)",
		"PASS  5000/s  local p99 vs NATS", "criteria (the sweep's bars)", "the latency is the overhead",
		"nats: one shared client connection", "result: PASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the text report lacks %q:\n%s", want, out)
		}
	}
	buf.Reset()
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sweep == nil || len(got.Sweep.Rows) != 12 || got.Sweep.Knees[config.ModeLocal] != 10000 ||
		got.Sweep.row(config.ModeLocal, 5000).P99VsNATS != 1.96 || got.Sweep.row(config.ModeLocal, 10000).NonOK["503 nodes_busy"] != 7 {
		t.Errorf("the JSON lost the sweep: %+v", got.Sweep)
	}
	buf.Reset()
	if err := rep.WriteHTML(&buf); err != nil || !strings.Contains(buf.String(), "local p99 vs NATS") {
		t.Errorf("HTML: %v", err)
	}
}

// The CPU per request is the sweep's headline table: every process's µs
// per ok request beside the latency, and the instances' over the floor's.
func TestSweepCPUPerRequest(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	floorProcs := []cluster.ProbeProc{{Role: cluster.RoleInstance, Name: "floor forwarder", PID: 7}, {Role: cluster.RoleLoadTest, Name: "load test", PID: 8}}
	crossProcs := []cluster.ProbeProc{
		{Role: cluster.RoleInstance, Name: "c-1", PID: 2}, {Role: cluster.RoleInstance, Name: "c-2", PID: 3},
		{Role: cluster.RoleRedis, Name: "redis-server 127.0.0.1:6379", PID: 4}, {Role: cluster.RolePostgres, Name: "postgres", PID: 5, Tree: true},
		{Role: cluster.RoleLoadTest, Name: "load test", PID: 8},
	}
	s := sweepReport()
	s.Modes = append(s.Modes, config.ModeFloor)
	floor := sweepRow(config.ModeFloor, 2500, 2) // 25,000 ok
	floor.CPU = NewStepCPU(floorProcs, ms(100, 50), ms(5100, 2550), 10.2, floor.OK)
	s.Rows = append(s.Rows, floor)
	cross := s.row(config.ModeCross, 2500)
	// 25,000 ok: 5 s and 2.5 s on the instances, 1 s Redis, PostgreSQL
	// unreadable at the end (left out), 2.5 s the load test.
	cross.CPU = NewStepCPU(crossProcs, ms(0, 0, 0, 10, 0), ms(5000, 2500, 1000, -1e-6, 2500), 10.5, cross.OK)
	// 50,000 publishes, 25,000 EVALSHA, 5,000 HSET over 25,000 ok; the
	// INFO reads left out; a counter that went down (a restart) too.
	cross.Redis = NewStepRedis(map[string]int64{"publish": 100, "evalsha": 7, "info": 3, "del": 90},
		map[string]int64{"publish": 50100, "evalsha": 25007, "hset": 5000, "info": 5, "del": 80}, cross.OK)
	cross.InstanceAllocs = 133.4
	s.Finish()

	if got := s.row(config.ModeFloor, 2500).CPU; got.InstanceUs != 200 || got.VsFloor != 0 || len(got.Procs) != 2 || got.Procs[1].UsPerRequest != 100 {
		t.Errorf("floor: %+v", got)
	}
	got := s.row(config.ModeCross, 2500).CPU
	if got.InstanceUs != 300 || got.VsFloor != 1.5 || len(got.Procs) != 4 || got.WindowS != 10.5 {
		t.Errorf("cross: %+v; want 300 µs on the instances, 1.5× the floor, postgres left out", got)
	}
	var buf bytes.Buffer
	rep := &Report{Profile: "sweep", Sweep: s, Pass: true}
	rep.WriteText(&buf)
	text := buf.String()
	if r := s.row(config.ModeCross, 2500).Redis; r == nil || r.Commands != 3.2 || r.Publishes != 2 || len(r.ByCommand) != 3 {
		t.Errorf("cross redis: %+v", r)
	}
	if NewStepRedis(nil, map[string]int64{"publish": 1}, 0) != nil {
		t.Error("Redis figures over no ok request")
	}
	for _, want := range []string{"instance µs/req", "instance/floor", "c-1 200 µs, c-2 100 µs",
		"cross at 2500/s, Redis per ok request: 3.20 commands, 2.00 publishes (publish 2.00, evalsha 1.00, hset 0.20)",
		"cross at 2500/s, instance heap allocations per ok request: 133"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text report lacks %q:\n%s", want, text)
		}
	}
	var line string
	for l := range strings.SplitSeq(text, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "cross" && f[1] == "2500" {
			if strings.Contains(l, "1.50×") {
				line = l
			}
		}
	}
	if f := strings.Fields(line); len(f) != 11 || f[6] != "300" || f[7] != "1.50×" || f[8] != "40" || f[9] != "—" || f[10] != "100" {
		t.Errorf("cross at 2500/s in the CPU table: %q", line)
	}
	buf.Reset()
	if err := rep.WriteHTML(&buf); err != nil || !strings.Contains(buf.String(), "<h2>CPU per request</h2>") || !strings.Contains(buf.String(), "<td>1.50×</td>") {
		t.Errorf("the HTML report lacks the CPU table (%v)", err)
	}
}
