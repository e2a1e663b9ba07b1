package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// Report is the whole invocation: every run, every request, the criteria.
type Report struct {
	Tool     string       `json:"tool"`
	Started  time.Time    `json:"started"`
	Finished time.Time    `json:"finished"`
	Profile  string       `json:"profile"`
	Mode     string       `json:"mode"`  // "spawn": instances started here; "target": given URLs
	Redis    string       `json:"redis"` // the Redis the instances shared: single, or a cluster of 3 masters
	Shape    string       `json:"shape"`
	Params   Params       `json:"params"`
	Host     Host         `json:"host"`
	Runs     []*RunReport `json:"runs"`
	Sweep    *SweepReport `json:"sweep,omitempty"` // the sweep profile's, which has no runs
	Burst    *BurstReport `json:"burst,omitempty"` // the burst profile's, which has no runs
	Criteria []Criterion  `json:"criteria"`
	Pass     bool         `json:"pass"`
	Notes    []string     `json:"notes,omitempty"`
	LogDir   string       `json:"log_dir,omitempty"`
}

// Params is the load shape as run, in plain units.
type Params struct {
	Instances       []int    `json:"instances"`
	Targets         []string `json:"targets,omitempty"`
	Nodes           int      `json:"nodes"`
	NodeConcurrency int      `json:"node_concurrency"`
	HandlerMinMs    float64  `json:"handler_min_ms"`
	HandlerMaxMs    float64  `json:"handler_max_ms"`
	RampTo          int      `json:"ramp_to"`
	RampS           float64  `json:"ramp_s"`
	Rate            float64  `json:"rate"`
	DurationS       float64  `json:"duration_s"`
	Streams         int      `json:"streams"`
	StreamS         float64  `json:"stream_s"`
	StreamChunks    int      `json:"stream_chunks"`
	Fault           string   `json:"fault"`
	FaultAtS        float64  `json:"fault_at_s"`
	SettleS         float64  `json:"settle_s"`
	TaskTimeoutS    float64  `json:"task_timeout_s"`
	GraceS          float64  `json:"grace_s"`
	ServeArgs       []string `json:"serve_args,omitempty"`
	RedisURL        string   `json:"redis_url,omitempty"`
	RedisCluster    bool     `json:"redis_cluster,omitempty"`
	ConnectRate     float64  `json:"connect_rate"`
	Fleet           bool     `json:"fleet,omitempty"`
	IdleS           float64  `json:"idle_s,omitempty"`
	Burst           bool     `json:"burst,omitempty"`
	Bars            BarsJSON `json:"bars"`

	// The sweep profile's.
	Sweep bool      `json:"sweep,omitempty"`
	Modes []string  `json:"modes,omitempty"`
	Rates []float64 `json:"rates,omitempty"`
}

// BarsJSON is config.Bars in plain units.
type BarsJSON struct {
	HopP95Ms      float64 `json:"hop_p95_ms"`
	HopP99Ms      float64 `json:"hop_p99_ms"`
	CPUPercent    float64 `json:"cpu_percent_at_100rps"`
	MemGrowth     float64 `json:"mem_growth"`
	FaultToFailMs float64 `json:"fault_to_502_ms"`
	IdleCPU       float64 `json:"idle_cpu_percent"`
	IdleRedisOps  float64 `json:"idle_redis_commands_per_s"`
	SweepLocal    float64 `json:"sweep_local_p99_vs_nats"`
	SweepCross    float64 `json:"sweep_cross_p99_vs_nats"`
}

func ParamsOf(c config.Config) Params {
	p := Params{
		Instances: c.Instances, Targets: c.Targets, Nodes: c.Nodes, NodeConcurrency: c.NodeConcurrency,
		HandlerMinMs: stats.Ms(c.HandlerMin), HandlerMaxMs: stats.Ms(c.HandlerMax), RampTo: c.RampTo, RampS: c.Ramp.Seconds(),
		Rate: c.Rate, DurationS: c.Duration.Seconds(), Streams: c.Streams, StreamS: c.StreamLength.Seconds(),
		StreamChunks: c.StreamChunks, Fault: c.Fault, FaultAtS: c.FaultAt.Seconds(), SettleS: c.Settle.Seconds(),
		TaskTimeoutS: c.TaskTimeout.Seconds(), GraceS: c.Grace.Seconds(), ServeArgs: c.ServeArgs,
		ConnectRate: c.ConnectRate, Fleet: c.Fleet, IdleS: c.Idle.Seconds(), RedisCluster: c.RedisCluster,
		Sweep: c.Sweep, Modes: c.Modes, Rates: c.Rates, Burst: c.Burst,
		Bars: BarsJSON{HopP95Ms: stats.Ms(c.Bars.HopP95), HopP99Ms: stats.Ms(c.Bars.HopP99), CPUPercent: c.Bars.CPUPercent,
			MemGrowth: c.Bars.MemGrowth, FaultToFailMs: stats.Ms(c.Bars.FaultToFail),
			IdleCPU: c.Bars.IdleCPUPercent, IdleRedisOps: c.Bars.IdleRedisOps,
			SweepLocal: c.Bars.SweepLocal, SweepCross: c.Bars.SweepCross},
	}
	if c.Spawn() {
		p.RedisURL = c.RedisURL
	}
	return p
}

// Host describes the machine the run was on.
type Host struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model,omitempty"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
}

func HostInfo() Host {
	h := Host{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return h
}

// WriteJSON writes the report as JSON, compact: the seed profile's has
// some 200,000 requests (pipe it through `jq .` to read it).
func (r *Report) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r)
}

// ReadReport reads a report written by WriteJSON.
func ReadReport(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	return &r, nil
}
