package main

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestProfilesAndOverrides(t *testing.T) {
	var stderr bytes.Buffer
	cfg, _, err := parseArgs(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	// The seed profile is seed 002 §4.1 exactly.
	if !slices.Equal(cfg.Instances, []int{1, 2, 3}) || cfg.Nodes != 200 || cfg.HandlerMin != 50*time.Millisecond ||
		cfg.HandlerMax != 500*time.Millisecond || cfg.RampTo != 200 || cfg.Rate != 100 || cfg.Duration != 10*time.Minute ||
		cfg.Streams != 50 || cfg.StreamLength != 5*time.Second || cfg.Fault != FaultKill {
		t.Errorf("seed profile: %+v", cfg)
	}
	cfg, out, err := parseArgs([]string{"--profile", "smoke", "--instances", "1,3", "--rate", "20", "--fault=sigterm",
		"--stream-seconds", "1.5", "--json", "r.json", "--bar-hop-p99", "7ms"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profile != "smoke" || cfg.Nodes != 40 || !slices.Equal(cfg.Instances, []int{1, 3}) || cfg.Rate != 20 ||
		cfg.Fault != FaultSIGTERM || cfg.StreamLength != 1500*time.Millisecond || out.json != "r.json" || cfg.Bars.HopP99 != 7*time.Millisecond {
		t.Errorf("smoke with overrides: %+v %+v", cfg, out)
	}
	if _, err := cfg.withDefaults(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

func TestTargetModeDefaults(t *testing.T) {
	var stderr bytes.Buffer
	cfg, _, err := parseArgs([]string{"--target", "http://a:8800", "--target", "http://b:8800", "--api-key", "k"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Instances, []int{1, 2}) || cfg.Fault != FaultNone {
		t.Errorf("target mode should compare the first target alone with both, without a fault: %v %s", cfg.Instances, cfg.Fault)
	}
	if _, err := cfg.withDefaults(); err != nil {
		t.Error(err)
	}
	cfg.Fault = FaultKill
	if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "--fault") {
		t.Errorf("a kill of a process that is not ours must be refused: %v", err)
	}
	cfg.Fault, cfg.APIKeys = FaultNone, nil
	if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "--api-key") {
		t.Errorf("targets without keys must be refused: %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	var stderr bytes.Buffer
	if _, _, err := parseArgs([]string{"--help"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	for _, s := range []string{"Criteria (DESIGN §8", "--fault-at", "--target", "exit status 0 only if"} {
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
	if _, err := cfg.withDefaults(); err == nil {
		t.Error("a fault after the steady phase must be refused")
	}
}
