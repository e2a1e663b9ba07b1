package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// valid is a run configuration Validate accepts: the smoke profile's
// shape.
func valid(t *testing.T) Config {
	t.Helper()
	c, err := ForProfile("smoke")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestValidateReportsEveryProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want []string // a part of each problem's sentence, every one reported
	}{
		{"the profiles are valid", func(*Config) {}, nil},
		{"zero means default", func(c *Config) {
			*c = Config{Instances: []int{1}, Nodes: 1, Rate: 1, Duration: time.Second}
		}, nil},
		{"several bad fields at once", func(c *Config) {
			c.Nodes, c.NodeConcurrency, c.Rate, c.TaskTimeout = 0, -1, -5, 100*time.Millisecond
			c.HandlerMin, c.HandlerMax = time.Second, time.Millisecond
			c.Fault = "reboot"
		}, []string{"--nodes must be at least 1", "--node-concurrency must be at least 1", "--rate must be positive",
			"--task-timeout must be at least 1s", "--handler-min (1s) and --handler-max (1ms)", `--fault "reboot": use none, kill or sigterm`}},
		{"instances", func(c *Config) { c.Instances = []int{0, -2} }, []string{
			"--instances: 0 is not a positive instance count", "--instances: -2 is not a positive instance count"}},
		{"no instances", func(c *Config) { c.Instances = nil }, []string{"--instances must list at least one"}},
		{"targets without keys, with a fault, serve args and a Redis Cluster", func(c *Config) {
			c.Targets, c.Instances, c.ServeArgs, c.RedisCluster = []string{"http://a:8800", "ftp://b"}, []int{1, 3}, []string{"--x"}, true
		}, []string{`--target "ftp://b" must be a base URL`, "--instances: 3 instances asked for, but only 2 --target given",
			"--target needs at least one --api-key", "--fault kill needs instances this program started",
			"--serve-arg applies only to instances this program starts", "--redis-cluster starts a Redis Cluster for instances this program starts"}},
		{"sweep flags on a run profile", func(c *Config) { c.Modes, c.Rates = []string{ModeNATS}, []float64{1} },
			[]string{"--modes and --rates belong to the sweep profile"}},
		{"idle outside the fleet", func(c *Config) { c.Idle = time.Second }, []string{"--idle is the fleet profile's idle window"}},
		{"ramp and streams", func(c *Config) { c.Ramp, c.Streams, c.StreamLength = 0, 3, -time.Second },
			[]string{"--ramp-to needs a --ramp length", "--streams needs a positive --stream-seconds"}},
		{"negative ramp", func(c *Config) { c.RampTo = -1 }, []string{"--ramp-to and --ramp must not be negative"}},
		{"fault after the steady phase", func(c *Config) { c.FaultAt = c.Duration }, []string{"--fault-at 15s must fall inside the steady phase"}},
		{"no fault-at complaint when the duration is the problem", func(c *Config) { c.Duration, c.FaultAt = -time.Second, time.Second },
			[]string{"--duration must be positive"}},
		{"negative waits and counts", func(c *Config) {
			c.Grace, c.Settle, c.FaultInstance, c.StreamChunks, c.NodesPerProcess, c.ConnectRate = -1, -1, -1, -1, -1, -1
		}, []string{"--grace must not be negative", "--fault-wait, --settle and --mem-min-stretch must not be negative",
			"--fault-instance must be an instance's number", "--stream-chunks must not be negative",
			"--nodes-per-process must be positive", "--connect-rate must be positive"}},
		{"accounts", func(c *Config) { c.ClientAccounts = -1 }, []string{"--client-accounts and --node-accounts must be at least 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid(t)
			tc.edit(&c)
			checkProblems(t, c.Validate(), tc.want)
		})
	}
}

func TestValidateFleet(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want []string
	}{
		{"the profile", func(*Config) {}, nil},
		{"a fault and a short idle window", func(c *Config) { c.Fault, c.Idle = FaultKill, 100*time.Millisecond },
			[]string{"--fault kill: the fleet profile", "--idle must be at least 1s"}},
		{"a negative idle window", func(c *Config) { c.Idle = -time.Second }, []string{"--idle must be at least 1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ForProfile("fleet")
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(&c)
			checkProblems(t, c.Validate(), tc.want)
		})
	}
}

func TestValidateSweep(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want []string
	}{
		{"the profile", func(*Config) {}, nil},
		{"zero means default", func(c *Config) { *c = Config{Sweep: true, Nodes: 1, Duration: time.Second} }, nil},
		{"every flag it has no use for", func(c *Config) {
			c.Instances, c.Targets, c.APIKeys, c.Fault, c.RampTo, c.Streams, c.StreamLength, c.Idle =
				[]int{2}, []string{"http://a:8800"}, []string{"k"}, FaultKill, 3, 2, time.Second, time.Second
		}, []string{"--instances: the sweep's modes fix the instances", "--target: the sweep starts its own instances",
			"--fault kill: the sweep injects no fault", "--ramp-to and --streams are not part of the sweep",
			"--idle is the fleet profile's idle window"}},
		{"modes and rates", func(c *Config) {
			c.Modes, c.Rates = []string{ModeLocal, "grpc", ModeLocal}, []float64{100, 50, 0}
		}, []string{`--modes: "grpc" is not a mode`, "--modes names local twice", "--rates must rise (50 after 100)", "--rates: 0 is not a positive rate"}},
		{"shared checks too", func(c *Config) { c.Nodes, c.Duration, c.TaskTimeout = 0, 0, time.Millisecond },
			[]string{"--nodes must be at least 1", "--duration must be positive", "--task-timeout must be at least 1s"}},
		{"more slots than the floor holds", func(c *Config) { c.Nodes, c.NodeConcurrency = 1000, 100 },
			[]string{"the floor holds at most 65536 slots"}},
		{"as many slots without the floor", func(c *Config) { c.Nodes, c.NodeConcurrency, c.Modes = 1000, 100, []string{ModeLocal} }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ForProfile("sweep")
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(&c)
			checkProblems(t, c.Validate(), tc.want)
		})
	}
}

// checkProblems requires err to hold exactly the problems want names
// (one a line, in any order), or none.
func checkProblems(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("accepted; want %d problems: %q", len(want), want)
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("not a joined error: %v", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.Contains(l, w)
		}
		if !found {
			t.Errorf("no problem says %q:\n%v", w, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	c := Config{Instances: []int{1, 2}, Duration: 10 * time.Second, StreamLength: 2 * time.Second,
		Bars: Bars{HopP99: 7 * time.Millisecond}}
	d := c.WithDefaults()
	if d.RedisURL != "redis://127.0.0.1:6379/0" || d.NodeConcurrency != 4 || d.ConnectRate != 500 || d.TaskTimeout != time.Minute ||
		d.Fault != FaultNone || d.FaultAt != 5*time.Second || d.StreamChunks != 8 || d.NodesPerProcess != DefaultNodesPerProcess {
		t.Errorf("defaults: %+v", d)
	}
	// A bar left zero takes its default; one set keeps its value.
	if d.Bars.HopP99 != 7*time.Millisecond || d.Bars.HopP95 != DefaultBars.HopP95 || d.Bars.SweepCross != DefaultBars.SweepCross {
		t.Errorf("bars: %+v", d.Bars)
	}
	if d.Idle != 0 || d.Modes != nil || d.Rates != nil {
		t.Errorf("a seed-shaped run got the fleet's or the sweep's defaults: idle %v, modes %v, rates %v", d.Idle, d.Modes, d.Rates)
	}
	// The caller's config is not changed, nor shares its slices.
	d.Instances[0] = 9
	if c.Instances[0] != 1 || c.RedisURL != "" || c.FaultAt != 0 {
		t.Errorf("WithDefaults changed its receiver: %+v", c)
	}
	if d.WithDefaults().FaultAt != d.FaultAt {
		t.Error("WithDefaults is not idempotent")
	}
}

func TestProfiles(t *testing.T) {
	seed, err := ForProfile("seed")
	if err != nil {
		t.Fatal(err)
	}
	// The seed profile is the scaling profile, exactly.
	if seed.Profile != "seed" || len(seed.Instances) != 3 || seed.Nodes != 200 || seed.RampTo != 200 || seed.Ramp != 30*time.Second ||
		seed.Rate != 100 || seed.Duration != 10*time.Minute || seed.Streams != 50 || seed.StreamLength != 5*time.Second || seed.Fault != FaultKill {
		t.Errorf("seed: %+v", seed)
	}
	// Derived defaults wait for the flags that change what they derive from.
	if seed.FaultAt != 0 || seed.StreamChunks != 0 || seed.Bars != DefaultBars {
		t.Errorf("seed: fault-at %v, stream chunks %d, bars %+v", seed.FaultAt, seed.StreamChunks, seed.Bars)
	}
	fleet, _ := ForProfile("fleet")
	if !fleet.Fleet || fleet.Idle != time.Minute || fleet.Nodes != 10000 {
		t.Errorf("fleet: %+v", fleet)
	}
	sweep, _ := ForProfile("sweep")
	sweep.Rates[0], sweep.Modes[0] = 1, "x"
	again, _ := ForProfile("sweep")
	if again.Rates[0] != 1000 || again.Modes[0] != ModeNATS {
		t.Errorf("a profile shares its slices between calls: %v %v", again.Rates, again.Modes)
	}
	if _, err := ForProfile("nope"); err == nil || !strings.Contains(err.Error(), ProfileNames) {
		t.Errorf("unknown profile: %v", err)
	}
}
