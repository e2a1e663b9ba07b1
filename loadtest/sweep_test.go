package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
)

func TestSweepProfileFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, _, err := parseArgs([]string{"--profile", "sweep"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Sweep || !slices.Equal(cfg.Modes, []string{"nats", "floor", "local", "cross"}) ||
		!slices.Equal(cfg.Rates, []float64{1000, 2500, 5000, 10000}) || cfg.Nodes != 20 || cfg.NodeConcurrency != 4 ||
		cfg.Duration != 10*time.Second || cfg.TaskTimeout != 10*time.Second || cfg.Fault != config.FaultNone ||
		cfg.Bars.SweepLocal != 2 || cfg.Bars.SweepCross != 3 {
		t.Errorf("sweep profile: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the sweep profile refused: %v", err)
	}
	cfg, _, err = parseArgs([]string{"--profile=sweep", "--modes", "cross,nats", "--rates", "10,20", "--duration", "2s",
		"--node-concurrency", "8", "--bar-sweep-local", "1.5", "--bar-sweep-cross", "2.5"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Modes, []string{"cross", "nats"}) || !slices.Equal(cfg.Rates, []float64{10, 20}) ||
		cfg.Duration != 2*time.Second || cfg.NodeConcurrency != 8 || cfg.Bars.SweepLocal != 1.5 || cfg.Bars.SweepCross != 2.5 {
		t.Errorf("sweep with overrides: %+v", cfg)
	}
	// The profile's defaults are not shared with the next parse.
	if again, _ := config.ForProfile("sweep"); !slices.Equal(again.Rates, []float64{1000, 2500, 5000, 10000}) {
		t.Errorf("parsing changed the profile: %v", again.Rates)
	}
	// The other profiles keep their own task timeout.
	if cfg, _, _ := parseArgs(nil, &stderr); cfg.TaskTimeout != 60*time.Second {
		t.Errorf("seed task timeout %v", cfg.TaskTimeout)
	}
	for _, args := range [][]string{
		{"--profile", "sweep", "--instances", "2"},
		{"--profile", "sweep", "--fault", "kill"},
		{"--profile", "sweep", "--streams", "3", "--stream-seconds", "1"},
		{"--profile", "sweep", "--target", "http://a:8800", "--api-key", "k"},
		{"--profile", "sweep", "--rates", "5000,1000"},
		{"--profile", "sweep", "--modes", "nats,grpc"},
		{"--profile", "sweep", "--task-timeout", "100ms"},
		{"--profile", "seed", "--modes", "nats"},
		{"--profile", "smoke", "--rates", "10,20"},
	} {
		cfg, _, err := parseArgs(args, &stderr)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	stderr.Reset()
	if _, _, err := parseArgs([]string{"--help"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, s := range []string{"--modes", "--rates", "sweep", "nats-server", "coordinated", "omission", "late",
		"local p99 vs NATS", "cross on schedule", "--bar-sweep-local", "slots"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("--help does not explain %q", s)
		}
	}
}

// TestSweepRun runs a tiny sweep (every mode at 50 and 100 requests/s,
// 1 s counted each) from the built binary: every request must have one
// outcome and every row be in the report. It judges no latency: on a
// shared 2-core machine a second at 100/s says nothing about the bars.
func TestSweepRun(t *testing.T) {
	cfg := loadConfig(t)
	rep, progress := runLoadtest(t, []string{"--profile", "sweep", "--switchyard", cfg.Switchyard,
		"--redis-url", cfg.RedisURL, "--database-url", cfg.DatabaseURL, "--log-dir", cfg.LogDir,
		"--rates", "50,100", "--duration", "1s"})
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	s := rep.Sweep
	if s == nil {
		t.Fatal("no sweep in the report")
	}
	var got []string
	for _, r := range s.Rows {
		got = append(got, fmt.Sprintf("%s %g", r.Mode, r.Rate))
		if r.Sent != r.Expected || r.Expected != int(r.Rate) {
			t.Errorf("%s at %g/s: %d sent of %d due", r.Mode, r.Rate, r.Sent, r.Expected)
		}
		if r.OK+r.Errors+r.Timeouts != r.Sent || r.NoOutcome != 0 || r.Doubles != 0 || r.Latency.N != r.OK {
			t.Errorf("%s at %g/s: outcomes %+v", r.Mode, r.Rate, r)
		}
		if r.OK == 0 {
			t.Errorf("%s at %g/s: not one echo came back: %v", r.Mode, r.Rate, r.NonOK)
		}
		if r.Mode != config.ModeNATS && r.P99VsNATS <= 0 {
			t.Errorf("%s at %g/s: no ratio to NATS", r.Mode, r.Rate)
		}
		// The cross mode's every request crosses the bus twice (the assign
		// to the instance holding the node, the result back): two publishes
		// each, less at most the first request's (it may go out just before
		// the count is read at the window's opening); the local mode's none.
		switch {
		case (r.Mode == config.ModeLocal || r.Mode == config.ModeCross) && r.Redis == nil:
			t.Errorf("%s at %g/s: Redis commands not counted", r.Mode, r.Rate)
		case r.Mode == config.ModeCross && r.Redis.Publishes < 1.9:
			t.Errorf("cross at %g/s: %.2f publishes per request, want 2: %+v", r.Rate, r.Redis.Publishes, r.Redis)
		case r.Mode == config.ModeLocal && r.Redis.Publishes >= 1:
			t.Errorf("local at %g/s: %.2f publishes per request: %+v", r.Rate, r.Redis.Publishes, r.Redis)
		case (r.Mode == config.ModeNATS || r.Mode == config.ModeFloor) && r.Redis != nil:
			t.Errorf("%s at %g/s: Redis counted for a mode without it", r.Mode, r.Rate)
		}
		// A request costs the instances some heap allocations, the modes
		// without an instance none measured.
		if hasInstance := r.Mode == config.ModeLocal || r.Mode == config.ModeCross; hasInstance != (r.InstanceAllocs > 0) {
			t.Errorf("%s at %g/s: %v instance allocations per request", r.Mode, r.Rate, r.InstanceAllocs)
		}
	}
	want := []string{"nats 50", "nats 100", "floor 50", "floor 100", "local 50", "local 100", "cross 50", "cross 100"}
	if !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	if len(s.Knees) != 4 || len(s.Members[config.ModeLocal]) != 1 || len(s.Members[config.ModeCross]) != 2 {
		t.Errorf("knees %v, members %v", s.Knees, s.Members)
	}
	status := map[string]string{}
	for _, c := range rep.Criteria {
		status[c.Name] = c.Status
	}
	for name, want := range map[string]string{report.CritSweepOutcomes: report.Pass, report.CritInstances: report.Pass,
		report.CritSweepLocal: report.Skip, report.CritSweepCross: report.Skip, report.CritSweepSchedule: report.Skip} {
		if status[name] != want {
			t.Errorf("criterion %q: %q, want %q", name, status[name], want)
		}
	}
	for _, line := range []string{"[sweep nats] ", "[sweep floor] ", "[sweep local] ", "[sweep cross] ", "s left"} {
		if !strings.Contains(progress, line) {
			t.Errorf("no progress line with %q:\n%s", line, progress)
		}
	}
	for _, s := range []string{"p99 passes 10 ms at: nats", "p99/NATS"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("the text report has no %q", s)
		}
	}
}
