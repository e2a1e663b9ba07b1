package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
)

// fleetRunReport is a synthetic 3-instance fleet run: busiest instance
// idleCPU % while idle, Redis idleRedis commands/s.
func fleetRunReport(idleCPU, idleRedis float64, shared bool) *RunReport {
	run := steadyRun(3, flat(50, 1), FaultReport{Kind: config.FaultNone})
	win := func(from, to, cpu, redis float64) Window {
		w := Window{Measured: true, FromS: from, ToS: to, Busiest: 1, LoadGenCPU: 7,
			Redis: RedisWindow{Measured: true, Servers: 3, Commands: int64(redis * (to - from)), PerSec: redis,
				ByServer: map[string]float64{"127.0.0.1:1": redis / 3, "127.0.0.1:2": redis / 3, "127.0.0.1:3": redis / 3}}}
		for i := range 3 {
			c := cpu / 2
			if i == 1 {
				c = cpu
			}
			w.Instances = append(w.Instances, InstanceWindow{Index: i, Name: fmt.Sprintf("i%d", i+1), CPUMean: c, CPUMax: c + 1,
				RSSStartKiB: 50000, RSSEndKiB: 50100})
		}
		return w
	}
	run.Fleet = &FleetReport{Nodes: 9000, NodesPerInstance: []int{3000, 3000, 3000}, ConnectRate: 500, RegisteredS: 18.2,
		ListedS: 18.5, Redis: "redis://127.0.0.1:6379/0", RedisShared: shared,
		Idle: win(25, 85, idleCPU, idleRedis), Loaded: win(85, 145, 9, 4000)}
	run.Fleet.Loaded.Sent = len(run.Records)
	for s := 25; s <= 145; s++ {
		run.Fleet.RedisSeries = append(run.Fleet.RedisSeries, cluster.RedisSample{T: float64(s), PerSec: idleRedis})
	}
	return run
}

func TestEvaluateFleet(t *testing.T) {
	run := fleetRunReport(1.5, 800, true)
	cs := Evaluate([]*RunReport{run}, config.DefaultBars)
	if !Passed(cs) {
		t.Fatalf("a fleet under the bars failed: %+v", cs)
	}
	for _, name := range []string{CritHopP95, CritCPU, CritMemory, CritFault} {
		for _, c := range cs {
			if c.Name == name {
				t.Errorf("the fleet profile judged %q: %+v", name, c)
			}
		}
	}
	c := find(t, cs, 3, CritIdleCPU)
	if !strings.Contains(c.Figure, "1.50% (instance 2") {
		t.Errorf("idle CPU figure: %q", c.Figure)
	}
	if c := find(t, cs, 3, CritIdleRedis); !strings.Contains(c.Figure, "800 commands/s") || !strings.Contains(c.Figure, "shared Redis") {
		t.Errorf("idle Redis figure: %q", c.Figure)
	}

	cs = Evaluate([]*RunReport{fleetRunReport(6, 14500, false)}, config.DefaultBars)
	if Passed(cs) {
		t.Fatal("a fleet over both bars passed")
	}
	if c := find(t, cs, 3, CritIdleCPU); c.Status != Fail || !strings.Contains(c.Detail, "over the bar") {
		t.Errorf("idle CPU: %+v", c)
	}
	if c := find(t, cs, 3, CritIdleRedis); c.Status != Fail || strings.Contains(c.Figure, "shared") {
		t.Errorf("idle Redis: %+v", c)
	}

	// An interrupted run has no idle window: not a pass.
	run = fleetRunReport(1, 100, false)
	run.Fleet.Idle = Window{Busiest: -1}
	if c := find(t, Evaluate([]*RunReport{run}, config.DefaultBars), 3, CritIdleCPU); c.Status != Fail {
		t.Errorf("an unmeasured idle window: %+v", c)
	}
	// Target mode: nothing of ours to measure.
	run = fleetRunReport(1, 100, false)
	run.Fleet.Idle.Instances, run.Fleet.Idle.Busiest = nil, -1
	run.Fleet.Idle.Redis = RedisWindow{Error: "not measured: the --target instances' Redis is not known to the load test"}
	cs = Evaluate([]*RunReport{run}, config.DefaultBars)
	if c := find(t, cs, 3, CritIdleCPU); c.Status != Skip {
		t.Errorf("idle CPU of targets: %+v", c)
	}
	if c := find(t, cs, 3, CritIdleRedis); c.Status != Skip {
		t.Errorf("idle Redis of targets: %+v", c)
	}
}

func TestFleetReportTextAndJSON(t *testing.T) {
	cfg := testCfg()
	cfg.Fleet, cfg.Fault, cfg.Idle = true, config.FaultNone, time.Minute
	rep := &Report{Tool: "switchyard loadtest", Profile: "fleet", Mode: "spawn", Redis: "single Redis at redis://127.0.0.1:6379/0",
		Shape: cfg.Summary(), Params: ParamsOf(cfg), Runs: []*RunReport{fleetRunReport(1.5, 800, true)}}
	rep.Criteria = Evaluate(rep.Runs, config.DefaultBars)
	rep.Pass = Passed(rep.Criteria)
	rep.Notes = Notes(cfg)
	var buf bytes.Buffer
	rep.WriteText(&buf)
	out := buf.String()
	for _, want := range []string{
		"redis: single Redis at", "idle cpu", "loaded redis/s", "1.50% (#2)", "800",
		"registration: 9000 nodes (3000/3000/3000 per instance)",
		"idle window 25.0–85.0 s", "loaded window 85.0–145.0 s",
		"busiest: instance 2, 1.50% of one core", "redis: 800 commands/s", "shared Redis",
		"PASS  3 inst  idle CPU per instance", "PASS  3 inst  idle Redis commands/s",
		"may carry other clients' traffic", "result: PASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet text report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hop +p95") {
		t.Errorf("the fleet report printed the seed table:\n%s", out)
	}
	buf.Reset()
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if f := got.Runs[0].Fleet; f == nil || f.Idle.Redis.PerSec != 800 || f.Idle.Instances[1].CPUMean != 1.5 || !got.Params.Fleet {
		t.Errorf("the JSON lost the fleet figures: %+v", f)
	}
	buf.Reset()
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if !strings.Contains(page, `data-plot="redis"`) || !strings.Contains(page, `>idle</text>`) || !strings.Contains(page, `>loaded</text>`) {
		t.Error("the HTML page has no Redis plot, or does not mark the idle and loaded windows")
	}
}
