package server

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
)

// A zero Config takes every default from DefaultConfig, and nothing else.
func TestConfigWithDefaultsIsDefaultConfig(t *testing.T) {
	got := Config{}.withDefaults()
	want := DefaultConfig()
	if got.InstanceName == "" || got.Logger == nil {
		t.Errorf("withDefaults left InstanceName %q and Logger %v unset", got.InstanceName, got.Logger)
	}
	// Resolved at start, not defaults: the host name and slog.Default().
	got.InstanceName, got.Logger = "", nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Config{}.withDefaults() =\n%+v\nwant DefaultConfig() =\n%+v", got, want)
	}
	if want.Namespace != bus.DefaultNamespace {
		t.Errorf("DefaultConfig().Namespace = %q, want bus.DefaultNamespace %q", want.Namespace, bus.DefaultNamespace)
	}
}

// Every field DefaultConfig leaves zero is one of these on purpose: off by
// default, resolved at start, or passed through for its component to fill.
// A new field with a default belongs in DefaultConfig, not here.
func TestDefaultConfigZeroFieldsAreDeliberate(t *testing.T) {
	deliberate := []string{
		"DatabaseURL", "InstanceName", "RedisURL", "RedisCluster", "SingleInstance",
		"UnsafeNoWatcher", "OpenRegistration", "TrustProxy", "NoNodeBenchmarks",
		"PprofListen", "PprofAllowRemote", "AdminToken", "Logger",
		"WebhookAllowPrivate",                // off: webhooks to private networks are refused
		"MaxInflightPerKey",                  // 0: no cap on in-flight requests per key (off by default)
		"ModelAliases",                       // none: every model routes by its name
		"TokenPrices",                        // none: every task type costs a unit a token
		"Hedge",                              // none: no task type is hedged
		"RegisterTimeout", "BenchmarkMaxAge", // package nodes fills these
	}
	v := reflect.ValueOf(DefaultConfig())
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if v.Field(i).IsZero() && !slices.Contains(deliberate, name) {
			t.Errorf("DefaultConfig().%s is zero: give it its default there, or list it here with the reason", name)
		}
	}
}

// withDefaults keeps what the caller set and does not share the caller's
// slice (config by value: the caller's struct is never changed).
func TestConfigWithDefaultsKeepsCallerValues(t *testing.T) {
	in := Config{Listen: "127.0.0.1:1", Namespace: "blue", TaskTimeout: time.Second, RequestRate: -1, SplitTaskTypes: []string{"a"}}
	out := in.withDefaults()
	if out.Listen != in.Listen || out.Namespace != "blue" || out.TaskTimeout != time.Second || out.RequestRate != -1 {
		t.Errorf("withDefaults overwrote set fields: %+v", out)
	}
	out.SplitTaskTypes[0] = "b"
	if in.SplitTaskTypes[0] != "a" {
		t.Error("withDefaults returned the caller's SplitTaskTypes slice")
	}
	if off := (Config{SplitTaskTypes: []string{}}).withDefaults(); off.SplitTaskTypes == nil || len(off.SplitTaskTypes) != 0 {
		t.Errorf("an empty, non-nil SplitTaskTypes (splitting off) became %q", off.SplitTaskTypes)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" accepts; otherwise a part of the one sentence
	}{
		{"the defaults", Config{}, ""},
		{"heartbeat just under half the TTL", Config{HeartbeatInterval: 7499 * time.Millisecond, LivenessTTL: 15 * time.Second}, ""},
		// Not less than half is refused, so exactly half is too.
		{"heartbeat exactly half the TTL", Config{HeartbeatInterval: 5 * time.Second, LivenessTTL: 10 * time.Second}, "--heartbeat-interval (5s) must be positive and less than half of --liveness-ttl (10s)"},
		{"heartbeat over half the TTL", Config{HeartbeatInterval: 6 * time.Second, LivenessTTL: 10 * time.Second}, "less than half of --liveness-ttl"},
		{"negative heartbeat", Config{HeartbeatInterval: -time.Second}, "--heartbeat-interval (-1s) must be positive"},
		{"instance name with ':'", Config{InstanceName: "a:b"}, "must not contain ':'"},
		{"single instance without Redis", Config{SingleInstance: true}, "--multi-instance=false only matters with --redis-url"},
		{"multi-instance without PostgreSQL", Config{RedisURL: "redis://127.0.0.1:6379/0"}, "needs --database-url"},
		{"namespace with a brace", Config{Namespace: "a{b"}, "--namespace"},

		{"negative drain timeout", Config{DrainTimeout: -time.Second}, "--drain-timeout must not be negative"},
		{"negative withdraw budget", Config{DrainWithdrawTimeout: -time.Second}, "--drain-withdraw-timeout must not be negative"},
		{"negative close budget", Config{DrainCloseTimeout: -time.Second}, "--drain-close-timeout must not be negative"},
		{"negative flush budget", Config{DrainFlushTimeout: -time.Second}, "--drain-flush-timeout must not be negative"},

		{"pprof on IPv4 loopback", Config{PprofListen: "127.0.0.1:6060"}, ""},
		{"pprof on IPv6 loopback", Config{PprofListen: "[::1]:6060"}, ""},
		{"pprof on localhost", Config{PprofListen: "localhost:0"}, ""},
		{"pprof on every interface", Config{PprofListen: ":6060"}, `--pprof-listen ":6060" is not a loopback address`},
		{"pprof on 0.0.0.0", Config{PprofListen: "0.0.0.0:6060"}, "add --pprof-allow-remote"},
		{"pprof on a host name", Config{PprofListen: "db.example.com:6060"}, "is not a loopback address"},
		{"pprof remote, said explicitly", Config{PprofListen: "0.0.0.0:6060", PprofAllowRemote: true}, ""},
		{"pprof without a port", Config{PprofListen: "127.0.0.1"}, "must be HOST:PORT"},
		{"pprof-allow-remote alone", Config{PprofAllowRemote: true}, "--pprof-allow-remote only matters with --pprof-listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && err == nil:
				t.Errorf("Validate() = nil, want an error saying %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("Validate() = %q, want it to say %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Errorf("Validate() = %q, want one sentence", err)
			}
		})
	}
}

// The stop budget is the drain's budgets together: with the defaults the
// 57s that deploy/compose.yaml's stop_grace_period must exceed, and it
// follows each budget.
func TestStopBudget(t *testing.T) {
	if got := (Config{}).StopBudget(); got != 57*time.Second {
		t.Errorf("the default stop budget is %s, want 57s (2s withdraw + 30s tasks + 15s close + 10s flush)", got)
	}
	raw, err := os.ReadFile("../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*stop_grace_period:\s*(\S+)`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("deploy/compose.yaml sets no stop_grace_period")
	}
	if grace, err := time.ParseDuration(string(m[1])); err != nil || grace <= DefaultConfig().StopBudget() {
		t.Errorf("deploy/compose.yaml's stop_grace_period is %s (%v); it must exceed the default stop budget, %s", m[1], err, DefaultConfig().StopBudget())
	}
	c := Config{DrainWithdrawTimeout: time.Second, DrainTimeout: 2 * time.Second, DrainCloseTimeout: 3 * time.Second, DrainFlushTimeout: 4 * time.Second}
	if got := c.StopBudget(); got != 10*time.Second {
		t.Errorf("StopBudget of %+v = %s, want 10s", c, got)
	}
}
