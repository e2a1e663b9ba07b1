package main

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
)

// TestFleetRun runs the fleet profile small (200 nodes on 2 instances, 80
// of them in a helper process, idle 5 s, then 20 requests/s for 5 s) from
// the built binary: the report must have both windows' figures for every
// instance and for Redis, and every request one outcome.
func TestFleetRun(t *testing.T) {
	cfg := loadConfig(t)
	rep, progress := runLoadtest(t, []string{"--profile", "fleet", "--switchyard", cfg.Switchyard,
		"--redis-url", cfg.RedisURL, "--database-url", cfg.DatabaseURL, "--log-dir", cfg.LogDir,
		"--instances", "2", "--nodes", "200", "--nodes-per-process", "120", "--connect-rate", "200", "--settle", "2s",
		"--idle", "5s", "--rate", "20", "--duration", "5s"})
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	if !rep.Pass {
		t.Fatalf("the small fleet run failed:\n%s", text.String())
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Fleet == nil {
		t.Fatalf("want one fleet run, got %d runs", len(rep.Runs))
	}
	run := rep.Runs[0]
	f := run.Fleet
	if f.Nodes != 200 || len(f.NodesPerInstance) != 2 || f.NodesPerInstance[0]+f.NodesPerInstance[1] != 200 {
		t.Errorf("nodes %d, per instance %v", f.Nodes, f.NodesPerInstance)
	}
	for name, w := range map[string]Window{"idle": f.Idle, "loaded": f.Loaded} {
		if !w.Measured || w.ToS-w.FromS < 4.5 || w.ToS-w.FromS > 6 {
			t.Errorf("%s window: measured %v, %.1f–%.1f s", name, w.Measured, w.FromS, w.ToS)
		}
		if len(w.Instances) != 2 || w.Busiest < 0 {
			t.Errorf("%s window: %d instances measured, busiest %d", name, len(w.Instances), w.Busiest)
		}
		for _, in := range w.Instances {
			if in.Gone || in.RSSEndKiB <= 0 || in.CPUMean < 0 {
				t.Errorf("%s window, instance %d: %+v", name, in.Index+1, in)
			}
		}
		// INFO itself counts: a measured Redis has processed something.
		if !w.Redis.Measured || w.Redis.Servers != 1 || w.Redis.Commands <= 0 {
			t.Errorf("%s window, Redis: %+v", name, w.Redis)
		}
	}
	if f.Idle.Sent != 0 {
		t.Errorf("%d requests sent in the idle window", f.Idle.Sent)
	}
	if !run.Accounting.OK() || run.Accounting.Sent < 90 || run.Accounting.Outcomes[ledger.OutcomeOK] != run.Accounting.Sent {
		t.Errorf("accounting %+v", run.Accounting)
	}
	if f.Loaded.Sent != run.Accounting.Sent {
		t.Errorf("the loaded window counts %d requests, the ledger %d", f.Loaded.Sent, run.Accounting.Sent)
	}
	// The loaded window does more than the idle one.
	if ib, ok := f.Idle.Busy(); ok {
		if lb, ok := f.Loaded.Busy(); ok && lb.CPUMean <= ib.CPUMean {
			t.Errorf("busiest instance at %.2f%% loaded, %.2f%% idle", lb.CPUMean, ib.CPUMean)
		}
	}
	names := map[string]string{}
	for _, c := range rep.Criteria {
		names[c.Name] = c.Status
	}
	for _, n := range []string{CritLost, CritIdleCPU, CritIdleRedis, CritUnaffect, CritInstances} {
		if names[n] != Pass {
			t.Errorf("criterion %q: %q", n, names[n])
		}
	}
	for _, s := range []string{"idle window", "loaded window", "busiest", "redis:", "single Redis at"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("the text report has no %q", s)
		}
	}
	for _, s := range []string{"[2 instances] idle", "[2 instances] loaded", "redis"} {
		if !strings.Contains(progress, s) {
			t.Errorf("no progress line with %q:\n%s", s, progress)
		}
	}
}

// TestRedisClusterSmoke runs a short smoke-shaped run (2 instances, 20
// nodes, a kill mid-run) on a Redis Cluster the load test starts itself;
// it must pass, say so in its header, and leave no redis-server behind.
func TestRedisClusterSmoke(t *testing.T) {
	cfg := loadConfig(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("redis-server is not installed: %v", err)
	}
	cfg.Instances = []int{2}
	cfg.Duration, cfg.FaultAt = 8*time.Second, 4*time.Second
	// runBinary passes --redis-url: leave it out for --redis-cluster.
	args := []string{"--profile", "smoke", "--switchyard", cfg.Switchyard, "--redis-cluster",
		"--database-url", cfg.DatabaseURL, "--log-dir", cfg.LogDir, "--instances", "2",
		"--nodes", fmt.Sprint(cfg.Nodes), "--ramp-to", fmt.Sprint(cfg.RampTo), "--ramp", cfg.Ramp.String(),
		"--rate", fmt.Sprint(cfg.Rate), "--duration", cfg.Duration.String(),
		"--streams", fmt.Sprint(cfg.Streams), "--stream-seconds", fmt.Sprint(cfg.StreamLength.Seconds()),
		"--fault", cfg.Fault, "--fault-at", cfg.FaultAt.String(), "--bar-cpu", fmt.Sprint(cfg.Bars.CPUPercent)}
	rep, progress := runLoadtest(t, args)
	var text bytes.Buffer
	rep.WriteText(&text)
	if !rep.Pass {
		var failed []string
		for _, c := range rep.Criteria {
			if c.Status == Fail {
				failed = append(failed, fmt.Sprintf("%d instances, %s: %s %s", c.Instances, c.Name, c.Figure, c.Detail))
			}
		}
		t.Fatalf("the smoke run on a Redis Cluster missed DESIGN §8:\n  %s\n\n%s", strings.Join(failed, "\n  "), text.String())
	}
	t.Logf("\n%s", text.String())
	if !strings.Contains(rep.Redis, "Redis Cluster of 3 masters") || !strings.Contains(text.String(), "redis: Redis Cluster of 3 masters") {
		t.Errorf("the header does not name the cluster: %q", rep.Redis)
	}
	if !strings.Contains(progress, "Redis Cluster up") {
		t.Errorf("no progress line for the cluster:\n%s", progress)
	}
	run := rep.Runs[0]
	if !run.Accounting.OK() || run.Fault.AtMs == 0 || run.Classes[ClassVictimTask] == 0 {
		t.Errorf("accounting %+v, fault %+v, classes %v", run.Accounting, run.Fault, run.Classes)
	}
	// The cluster is gone with the load test.
	opt, err := redis.ParseClusterURL(rep.Params.RedisURL)
	if err != nil {
		t.Fatalf("the report's Redis URL %q: %v", rep.Params.RedisURL, err)
	}
	if len(opt.Addrs) != 3 {
		t.Errorf("cluster seeds %v, want 3", opt.Addrs)
	}
	for _, a := range opt.Addrs {
		if c, err := net.DialTimeout("tcp", a, 200*time.Millisecond); err == nil {
			_ = c.Close()
			t.Errorf("a redis-server still listens on %s after the load test exited", a)
		}
	}
}

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
		Shape: cfg.Summary(), Params: paramsOf(cfg), Runs: []*RunReport{fleetRunReport(1.5, 800, true)}}
	rep.Criteria = Evaluate(rep.Runs, config.DefaultBars)
	rep.Pass = Passed(rep.Criteria)
	rep.Notes = notes(cfg)
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
