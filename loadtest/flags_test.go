package main

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
)

func TestProfilesAndOverrides(t *testing.T) {
	var stderr bytes.Buffer
	cfg, _, err := parseArgs(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	// The seed profile is the scaling profile, exactly.
	if !slices.Equal(cfg.Instances, []int{1, 2, 3}) || cfg.Nodes != 200 || cfg.HandlerMin != 50*time.Millisecond ||
		cfg.HandlerMax != 500*time.Millisecond || cfg.RampTo != 200 || cfg.Rate != 100 || cfg.Duration != 10*time.Minute ||
		cfg.Streams != 50 || cfg.StreamLength != 5*time.Second || cfg.Fault != config.FaultKill {
		t.Errorf("seed profile: %+v", cfg)
	}
	cfg, out, err := parseArgs([]string{"--profile", "smoke", "--instances", "1,3", "--rate", "20", "--fault=sigterm",
		"--stream-seconds", "1.5", "--json", "r.json", "--bar-hop-p99", "7ms"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profile != "smoke" || cfg.Nodes != 40 || !slices.Equal(cfg.Instances, []int{1, 3}) || cfg.Rate != 20 ||
		cfg.Fault != config.FaultSIGTERM || cfg.StreamLength != 1500*time.Millisecond || out.json != "r.json" || cfg.Bars.HopP99 != 7*time.Millisecond {
		t.Errorf("smoke with overrides: %+v %+v", cfg, out)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

func TestTargetModeDefaults(t *testing.T) {
	var stderr bytes.Buffer
	cfg, _, err := parseArgs([]string{"--target", "http://a:8800", "--target", "http://b:8800", "--api-key", "k"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Instances, []int{1, 2}) || cfg.Fault != config.FaultNone {
		t.Errorf("target mode should compare the first target alone with both, without a fault: %v %s", cfg.Instances, cfg.Fault)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
	cfg.Fault = config.FaultKill
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--fault") {
		t.Errorf("a kill of a process that is not ours must be refused: %v", err)
	}
	cfg.Fault, cfg.APIKeys = config.FaultNone, nil
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--api-key") {
		t.Errorf("targets without keys must be refused: %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	var stderr bytes.Buffer
	if _, _, err := parseArgs([]string{"--help"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	for _, s := range []string{"Criteria (our bars", "--fault-at", "--target", "exit status 0 only if",
		"--redis-cluster", "--connect-rate", "--idle", "fleet", "idle CPU per instance", "idle Redis commands/s"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("--help does not explain %q", s)
		}
	}
	if code := cli([]string{"--profile", "nope"}, &stderr, &stderr); code != exitError {
		t.Errorf("unknown profile: exit %d", code)
	}
	if code := cli([]string{"--instances", "1,x"}, &stderr, &stderr); code != exitError {
		t.Errorf("bad list: exit %d", code)
	}
	cfg, _, _ := parseArgs([]string{"--fault-at", "20m"}, &stderr)
	if err := cfg.Validate(); err == nil {
		t.Error("a fault after the steady phase must be refused")
	}
}

func TestFleetProfileFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, _, err := parseArgs([]string{"--profile", "fleet"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Fleet || cfg.Nodes != 10000 || !slices.Equal(cfg.Instances, []int{1, 2, 3}) || cfg.Idle != time.Minute ||
		cfg.Rate != 100 || cfg.Duration != time.Minute || cfg.Fault != config.FaultNone || cfg.RampTo != 0 || cfg.Streams != 0 ||
		cfg.ConnectRate != 500 || cfg.Bars.IdleCPUPercent != 5 || cfg.Bars.IdleRedisOps != 3000 {
		t.Errorf("fleet profile: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the fleet profile refused: %v", err)
	}
	cfg, _, err = parseArgs([]string{"--profile=fleet", "--nodes", "300", "--idle", "10s", "--redis-cluster",
		"--connect-rate", "50", "--bar-idle-cpu", "2", "--bar-idle-redis", "500"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Nodes != 300 || cfg.Idle != 10*time.Second || !cfg.RedisCluster || cfg.ConnectRate != 50 ||
		cfg.Bars.IdleCPUPercent != 2 || cfg.Bars.IdleRedisOps != 500 {
		t.Errorf("fleet with overrides: %+v", cfg)
	}
	for _, args := range [][]string{
		{"--profile", "fleet", "--fault", "kill"},
		{"--profile", "smoke", "--idle", "5s"},
		{"--profile", "fleet", "--idle", "100ms"},
		{"--redis-cluster", "--target", "http://a:8800", "--api-key", "k"},
	} {
		cfg, _, err := parseArgs(args, &stderr)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if _, _, err := parseArgs([]string{"--redis-cluster", "--redis-url", "redis://h:1"}, &stderr); err == nil {
		t.Error("--redis-cluster with --redis-url accepted")
	}
}

// More nodes than open files allow: a clear error before anything starts.
func TestTooManyNodesForTheFileLimit(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := cli([]string{"--profile", "fleet", "--nodes", "10000000", "--quiet"}, &stdout, &stderr); code != exitError {
		t.Fatalf("exit %d, want %d", code, exitError)
	}
	if !strings.Contains(stderr.String(), "RLIMIT_NOFILE") || !strings.Contains(stderr.String(), "--nodes 10000000") {
		t.Errorf("the error does not explain the limit: %s", stderr.String())
	}
}
