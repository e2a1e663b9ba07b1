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
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
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
	for name, w := range map[string]report.Window{"idle": f.Idle, "loaded": f.Loaded} {
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
	for _, n := range []string{report.CritLost, report.CritIdleCPU, report.CritIdleRedis, report.CritUnaffect, report.CritInstances} {
		if names[n] != report.Pass {
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
			if c.Status == report.Fail {
				failed = append(failed, fmt.Sprintf("%d instances, %s: %s %s", c.Instances, c.Name, c.Figure, c.Detail))
			}
		}
		t.Fatalf("the smoke run on a Redis Cluster missed our bars:\n  %s\n\n%s", strings.Join(failed, "\n  "), text.String())
	}
	t.Logf("\n%s", text.String())
	if !strings.Contains(rep.Redis, "Redis Cluster of 3 masters") || !strings.Contains(text.String(), "redis: Redis Cluster of 3 masters") {
		t.Errorf("the header does not name the cluster: %q", rep.Redis)
	}
	if !strings.Contains(progress, "Redis Cluster up") {
		t.Errorf("no progress line for the cluster:\n%s", progress)
	}
	run := rep.Runs[0]
	if !run.Accounting.OK() || run.Fault.AtMs == 0 || run.Classes[report.ClassVictimTask] == 0 {
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
