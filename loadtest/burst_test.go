package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
)

func TestBurstProfileFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, _, err := parseArgs([]string{"--profile", "burst"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Burst || cfg.Nodes != 9000 || cfg.Duration != time.Minute || len(cfg.Instances) != 1 || cfg.Instances[0] != 1 ||
		cfg.Fault != config.FaultNone || cfg.Rate != 0 {
		t.Errorf("burst profile: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the burst profile refused: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--instances", "2"}, "--instances: the burst profile connects every node to one instance"},
		{[]string{"--fault", "kill"}, "--fault kill: the burst profile injects no fault"},
		{[]string{"--rate", "10"}, "it sends no requests"},
		{[]string{"--target", "http://a:8800", "--api-key", "k"}, "the burst profile starts a fresh instance"},
		{[]string{"--modes", "nats"}, "--modes and --rates belong to the sweep profile"},
	} {
		cfg, _, err := parseArgs(append([]string{"--profile", "burst"}, tc.args...), &stderr)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// TestBurstRun runs the burst profile small (300 nodes at once, the naive
// client for 10 s) from the built binary: every SDK node must register
// and be listed, and the report must have both clients' figures.
func TestBurstRun(t *testing.T) {
	cfg := loadConfig(t)
	rep, progress := runLoadtest(t, []string{"--profile", "burst", "--switchyard", cfg.Switchyard,
		"--redis-url", cfg.RedisURL, "--database-url", cfg.DatabaseURL, "--log-dir", cfg.LogDir,
		"--nodes", "300", "--duration", "10s"})
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	if !rep.Pass {
		t.Fatalf("the small burst failed:\n%s", text.String())
	}
	b := rep.Burst
	if b == nil || b.Nodes != 300 {
		t.Fatalf("burst report %+v", b)
	}
	s := b.SDK
	if s.Registered != 300 || s.Listed != 300 || s.AllS <= 0 || s.ListedS < s.AllS || len(s.Quantiles) != 3 {
		t.Errorf("SDK phase: %+v", s)
	}
	for i := 1; i < len(s.Quantiles); i++ {
		if s.Quantiles[i].S < s.Quantiles[i-1].S || s.Quantiles[i].S > s.AllS {
			t.Errorf("SDK quantiles out of order: %+v, all in %.3f s", s.Quantiles, s.AllS)
		}
	}
	n := b.Naive
	if n.Client != "naive" || n.Attempts < 300 || n.Registered < 1 || n.WindowS <= 0 || n.WindowS > 11 {
		t.Errorf("naive phase: %+v", n)
	}
	if n.Sheds != n.Rejections["busy"] || s.Sheds != s.Rejections["busy"] {
		t.Errorf("sheds %v / %v, rejections %v / %v", s.Sheds, n.Sheds, s.Rejections, n.Rejections)
	}
	if len(rep.Criteria) != 1 || rep.Criteria[0].Name != report.CritBurstSDK || rep.Criteria[0].Status != report.Pass {
		t.Errorf("criteria %+v", rep.Criteria)
	}
	for _, want := range []string{"client  nodes", "sdk", "naive", "sheds (1013)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text report has no %q", want)
		}
	}
	for _, want := range []string{"[burst sdk]", "[burst naive]"} {
		if !strings.Contains(progress, want) {
			t.Errorf("no progress line with %q:\n%s", want, progress)
		}
	}
}
