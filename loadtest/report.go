package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
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

func paramsOf(c config.Config) Params {
	p := Params{
		Instances: c.Instances, Targets: c.Targets, Nodes: c.Nodes, NodeConcurrency: c.NodeConcurrency,
		HandlerMinMs: stats.Ms(c.HandlerMin), HandlerMaxMs: stats.Ms(c.HandlerMax), RampTo: c.RampTo, RampS: c.Ramp.Seconds(),
		Rate: c.Rate, DurationS: c.Duration.Seconds(), Streams: c.Streams, StreamS: c.StreamLength.Seconds(),
		StreamChunks: c.StreamChunks, Fault: c.Fault, FaultAtS: c.FaultAt.Seconds(), SettleS: c.Settle.Seconds(),
		TaskTimeoutS: c.TaskTimeout.Seconds(), GraceS: c.Grace.Seconds(), ServeArgs: c.ServeArgs,
		ConnectRate: c.ConnectRate, Fleet: c.Fleet, IdleS: c.Idle.Seconds(), RedisCluster: c.RedisCluster,
		Sweep: c.Sweep, Modes: c.Modes, Rates: c.Rates,
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

func hostInfo() Host {
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

// RunReport is one configuration (a number of instances).
type RunReport struct {
	Instances int                 `json:"instances"`
	Members   []*cluster.Instance `json:"members"`
	Rate      float64             `json:"rate"`
	Phases    Phases              `json:"phases"`
	Fault     FaultReport         `json:"fault"`
	Events    []Event             `json:"events"`

	Accounting ledger.Accounting `json:"accounting"`
	Errors     map[string]int    `json:"errors"`  // "<status> <code>" → count, every non-ok outcome
	Classes    map[string]int    `json:"classes"` // fault class → count

	// Plain requests of the steady phase that succeeded, outside the
	// fault's window: the hop comparison's population.
	Latency  stats.Dist `json:"latency_ms"`
	Overhead stats.Dist `json:"overhead_ms"`
	// The same including the fault window.
	OverheadAll stats.Dist `json:"overhead_all_ms"`
	// Within this run: requests whose node was on the instance they were
	// sent to (local) or on another (cross).
	OverheadLocal stats.Dist `json:"overhead_local_ms"`
	OverheadCross stats.Dist `json:"overhead_cross_ms"`
	Streams       stats.Dist `json:"stream_latency_ms"`
	Ramp          stats.Dist `json:"ramp_latency_ms"`
	SentRate      float64    `json:"steady_sent_per_s"`
	MaxLagMs      float64    `json:"max_send_lag_ms"`
	// FaultToError is, for every victim task (and in-transit one that
	// failed), the time from the signal to its outcome.
	FaultToError stats.Dist `json:"fault_to_error_ms"`

	// Fleet is the fleet profile's idle and loaded windows; nil otherwise.
	Fleet *FleetReport `json:"fleet,omitempty"`

	// Counters are each instance's switchyard counters at the end of the
	// run (refusals, dropped answers, dead owners…), by instance name.
	Counters map[string]map[string]float64 `json:"switchyard_counters,omitempty"`

	Resources []Resources      `json:"resources,omitempty"`
	LoadGen   []cluster.Sample `json:"loadgen,omitempty"` // the load test's own process
	Records   []*ledger.Record `json:"requests"`
}

// Resources is one instance's CPU and memory over the run.
type Resources struct {
	Instance int              `json:"instance"`
	Name     string           `json:"name"`
	Samples  []cluster.Sample `json:"samples"`
	// Over the steady phase (until the kill, for a killed instance).
	CPUMean   float64 `json:"cpu_mean"`
	CPUMax    float64 `json:"cpu_max"`
	CPUScaled float64 `json:"cpu_at_100rps"` // CPUMean × 100 / rate
	RSSStart  int64   `json:"rss_start_kib"`
	RSSEnd    int64   `json:"rss_end_kib"`
	// Segments are the stretches of the steady phase without a topology
	// change (before the fault, and from Settle after it); growth is the
	// mean RSS of a segment's last fifth against its first fifth.
	Segments  []MemSegment `json:"segments"`
	MemGrowth float64      `json:"mem_growth"` // the largest segment growth
	MemJudged bool         `json:"mem_judged"` // some segment was long enough
}

// MemSegment is one stretch judged for memory growth.
type MemSegment struct {
	FromS   float64 `json:"from_s"`
	ToS     float64 `json:"to_s"`
	Samples int     `json:"samples"`
	Growth  float64 `json:"growth"`
	Judged  bool    `json:"judged"` // long enough (Config.MemMinStretch) with enough samples
}

// minMemSamples is the fewest 1-second samples a segment needs, whatever
// its length, for its memory growth to mean anything.
const minMemSamples = 5

// buildRun computes the figures of one run from its records and samples.
func buildRun(cfg config.Config, insts []*cluster.Instance, recs []*ledger.Record, doubles []string, fault FaultReport,
	phases Phases, events []Event, samples [][]cluster.Sample, self []cluster.Sample, maxLag time.Duration) *RunReport {
	rr := &RunReport{Instances: len(insts), Members: insts, Rate: cfg.Rate, Phases: phases, Fault: fault,
		Events: events, Errors: map[string]int{}, Classes: map[string]int{}, Records: recs, LoadGen: self,
		MaxLagMs: stats.Round3(stats.Ms(maxLag))}
	Classify(recs, fault)
	rr.Accounting = ledger.Account(recs, doubles)
	wFrom, wTo, hasWindow := faultWindow(fault, stats.Ms(cfg.Settle))

	var lat, over, overAll, local, cross, streams, ramp, toErr []float64
	steadySent := 0
	for _, r := range recs {
		rr.Classes[r.Class]++
		if r.Outcome != ledger.OutcomeOK {
			rr.Errors[errorKey(r)]++
		}
		if (r.Class == ClassVictimTask || r.Class == ClassInTransit) && r.Outcome != ledger.OutcomeOK {
			toErr = append(toErr, r.DoneMs-fault.AtMs)
		}
		if r.Phase == ledger.PhaseSteady && r.Kind == ledger.KindPlain {
			steadySent++
		}
		if r.Outcome != ledger.OutcomeOK {
			continue
		}
		switch {
		case r.Kind == ledger.KindStream:
			streams = append(streams, r.LatencyMs)
		case r.Phase == ledger.PhaseRamp:
			ramp = append(ramp, r.LatencyMs)
		default:
			overAll = append(overAll, r.OverheadMs)
			if hasWindow && r.SentMs < wTo && r.DoneMs > wFrom {
				continue
			}
			lat = append(lat, r.LatencyMs)
			over = append(over, r.OverheadMs)
			if r.NodeInst >= 0 && r.NodeInst == r.Via {
				local = append(local, r.OverheadMs)
			} else if r.NodeInst >= 0 {
				cross = append(cross, r.OverheadMs)
			}
		}
	}
	rr.Latency, rr.Overhead, rr.OverheadAll = stats.Summarise(lat), stats.Summarise(over), stats.Summarise(overAll)
	rr.OverheadLocal, rr.OverheadCross = stats.Summarise(local), stats.Summarise(cross)
	rr.Streams, rr.Ramp, rr.FaultToError = stats.Summarise(streams), stats.Summarise(ramp), stats.Summarise(toErr)
	if d := phases.SteadyEnd - phases.SteadyStart; d > 0 {
		rr.SentRate = stats.Round3(float64(steadySent) / d)
	}

	for i, in := range insts {
		if i >= len(samples) || len(samples[i]) == 0 {
			continue
		}
		rr.Resources = append(rr.Resources, resourcesOf(cfg, in, samples[i], phases, fault, hasWindow, wFrom/1000, wTo/1000))
	}
	return rr
}

// errorKey names a non-ok outcome: "502 node_disconnected", "transport", "lost".
func errorKey(r *ledger.Record) string {
	switch r.Outcome {
	case ledger.OutcomeError:
		if r.Kind == ledger.KindStream && r.Status == http.StatusOK {
			return "stream " + r.Code // an error event in a stream that had started
		}
		if r.Status == 0 {
			return r.Code
		}
		return fmt.Sprintf("%d %s", r.Status, r.Code)
	case ledger.OutcomeFailed:
		return "task failed"
	}
	return r.Outcome
}

func resourcesOf(cfg config.Config, in *cluster.Instance, s []cluster.Sample, ph Phases, f FaultReport, hasWindow bool, wFromS, wToS float64) Resources {
	res := Resources{Instance: in.Index, Name: in.Name, Samples: s}
	killed := f.Skipped == "" && f.Kind != config.FaultNone && f.Instance == in.Index
	end := ph.SteadyEnd
	if killed && f.AtMs > 0 {
		end = min(end, f.AtMs/1000)
	}
	var steady []cluster.Sample
	for _, x := range s {
		if x.T >= ph.SteadyStart && x.T <= end {
			steady = append(steady, x)
		}
	}
	if len(steady) == 0 {
		return res
	}
	cpus := make([]float64, len(steady))
	for i, x := range steady {
		cpus[i] = x.CPU
	}
	res.CPUMean = stats.Round3(stats.Mean(cpus))
	res.CPUMax = stats.Round3(slices.Max(cpus))
	res.CPUScaled = stats.Round3(res.CPUMean * 100 / cfg.Rate)
	res.RSSStart, res.RSSEnd = steady[0].RSSKiB, steady[len(steady)-1].RSSKiB

	type span struct{ from, to float64 }
	spans := []span{{ph.SteadyStart, end}}
	if hasWindow {
		spans = []span{{ph.SteadyStart, min(wFromS, end)}}
		if !killed {
			spans = append(spans, span{wToS, ph.SteadyEnd})
		}
	}
	for _, sp := range spans {
		if sp.to <= sp.from {
			continue
		}
		var rss []float64
		for _, x := range steady {
			if x.T >= sp.from && x.T <= sp.to {
				rss = append(rss, float64(x.RSSKiB))
			}
		}
		seg := MemSegment{FromS: stats.Round3(sp.from), ToS: stats.Round3(sp.to), Samples: len(rss)}
		long := sp.to-sp.from >= cfg.MemMinStretch.Seconds()
		g, ok := stats.Trend(rss)
		if ok {
			seg.Growth = math.Round(g*1e4) / 1e4
		}
		if ok && long && len(rss) >= minMemSamples {
			seg.Judged = true
			if !res.MemJudged || seg.Growth > res.MemGrowth {
				res.MemGrowth = seg.Growth
			}
			res.MemJudged = true
		}
		res.Segments = append(res.Segments, seg)
	}
	return res
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

// WriteText writes the human summary: a table of the runs, the criteria,
// and the notes.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "switchyard load test — profile %s, %s mode\n", r.Profile, r.Mode)
	fmt.Fprintf(w, "load: %s\n", r.Shape)
	if r.Redis != "" {
		fmt.Fprintf(w, "redis: %s\n", r.Redis)
	}
	fmt.Fprintf(w, "host: %d CPUs (%s), %s, %s; %s → %s\n\n", r.Host.CPUs, r.Host.CPUModel, r.Host.OS, r.Host.GoVersion,
		r.Started.Format(time.RFC3339), r.Finished.Format(time.RFC3339))

	switch {
	case r.Sweep != nil:
		r.writeSweep(w)
	case isFleet(r.Runs):
		r.writeFleetTable(w)
	default:
		r.writeTable(w)
	}

	for _, run := range r.Runs {
		fmt.Fprintf(w, "\n%d instance%s:\n", run.Instances, plural(run.Instances))
		for _, in := range run.Members {
			fmt.Fprintf(w, "  instance %d %s %s", in.Index+1, in.Name, in.URL)
			if in.PID != 0 {
				fmt.Fprintf(w, " pid %d", in.PID)
			}
			fmt.Fprintln(w)
		}
		if len(run.Errors) > 0 {
			fmt.Fprintf(w, "  non-ok outcomes: %s\n", strings.Join(countParts(run.Errors), ", "))
		}
		if run.Fleet != nil {
			writeFleetRun(w, run)
		} else {
			if run.OverheadLocal.N > 0 && run.OverheadCross.N > 0 {
				fmt.Fprintf(w, "  overhead within the run: local p95 %.3f p99 %.3f ms (n %d); cross-instance p95 %.3f p99 %.3f ms (n %d)\n",
					run.OverheadLocal.P95, run.OverheadLocal.P99, run.OverheadLocal.N, run.OverheadCross.P95, run.OverheadCross.P99, run.OverheadCross.N)
			}
			if run.OverheadAll.N != run.Overhead.N {
				fmt.Fprintf(w, "  overhead including the fault window: p95 %.3f p99 %.3f max %.3f ms (n %d)\n",
					run.OverheadAll.P95, run.OverheadAll.P99, run.OverheadAll.Max, run.OverheadAll.N)
			}
			if run.Streams.N > 0 {
				fmt.Fprintf(w, "  streams: %d ok, latency p50 %.0f p99 %.0f ms\n", run.Streams.N, run.Streams.P50, run.Streams.P99)
			}
			if run.Ramp.N > 0 {
				fmt.Fprintf(w, "  ramp: %d ok, latency p50 %.0f p99 %.0f ms\n", run.Ramp.N, run.Ramp.P50, run.Ramp.P99)
			}
			fmt.Fprintf(w, "  steady sends %.1f/s, worst send lag %.1f ms\n", run.SentRate, run.MaxLagMs)
			for _, res := range run.Resources {
				fmt.Fprintf(w, "  %s: cpu mean %.1f%% max %.1f%% (%.1f%% at 100/s), rss %d → %d KiB", res.Name, res.CPUMean, res.CPUMax, res.CPUScaled, res.RSSStart, res.RSSEnd)
				for _, seg := range res.Segments {
					if seg.Judged {
						fmt.Fprintf(w, "; %.0f–%.0fs %+.2f%%", seg.FromS, seg.ToS, 100*seg.Growth)
					} else {
						fmt.Fprintf(w, "; %.0f–%.0fs %+.2f%% (too short to judge)", seg.FromS, seg.ToS, 100*seg.Growth)
					}
				}
				fmt.Fprintln(w)
			}
		}
		for _, m := range run.Members {
			cs := run.Counters[m.Name]
			if len(cs) == 0 {
				continue
			}
			fmt.Fprintf(w, "  %s counters: %s\n", m.Name, strings.Join(counterParts(cs), ", "))
		}
		for _, e := range run.Events {
			fmt.Fprintf(w, "  %7.2fs  %s\n", e.T, e.What)
		}
		if run.Fault.Skipped != "" {
			fmt.Fprintf(w, "  fault skipped: %s\n", run.Fault.Skipped)
		}
		if f := run.Fault; f.Skipped == "" && f.AtMs > 0 {
			fmt.Fprintf(w, "  requests by their relation to the fault: %s %d, %s %d, %s %d, %s %d, %s %d, %s %d\n",
				ClassVictimTask, run.Classes[ClassVictimTask], ClassInTransit, run.Classes[ClassInTransit],
				ClassVictimRequester, run.Classes[ClassVictimRequester], ClassDrainTask, run.Classes[ClassDrainTask],
				ClassDrainRequester, run.Classes[ClassDrainRequester], ClassOther, run.Classes[ClassOther])
		}
		if run.FaultToError.N > 0 {
			fmt.Fprintf(w, "  fault → error of its %d tasks: min %.0f p50 %.0f max %.0f ms\n",
				run.FaultToError.N, run.FaultToError.Min, run.FaultToError.P50, run.FaultToError.Max)
		}
		if len(run.Accounting.Duplicates) > 0 {
			fmt.Fprintf(w, "  warning: %d requests were started by a node more than once (at-most-once broken): %v\n",
				len(run.Accounting.Duplicates), firstN(run.Accounting.Duplicates, 10))
		}
	}

	if r.Sweep != nil {
		fmt.Fprintln(w, "\ncriteria (issue 13's bars):")
	} else {
		fmt.Fprintln(w, "\ncriteria (DESIGN §8, our bars):")
	}
	for _, c := range r.Criteria {
		fmt.Fprintf(w, "  %-4s  %-7s %-28s %s (bar: %s)\n", c.Status, c.scope(), c.Name, c.Figure, c.Bar)
		if c.Detail != "" {
			fmt.Fprintf(w, "        %s\n", c.Detail)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\nresult: %s\n", verdict)
}

// writeTable is the seed and smoke profiles' table of the runs.
func (r *Report) writeTable(w io.Writer) {
	tw := newTable("instances", "sent", "ok", "errors", "lost", "steady/s", "lat p50", "lat p95", "lat p99",
		"ovh p50", "ovh p95", "ovh p99", "hop +p95", "hop +p99", "cpu@100/s", "mem growth", "fault→502 max")
	base := baseline(r.Runs)
	for _, run := range r.Runs {
		errs := 0
		for k, n := range run.Accounting.Outcomes {
			if k != ledger.OutcomeOK && k != ledger.OutcomeLost {
				errs += n
			}
		}
		hop95, hop99 := "—", "—"
		if base != nil && run != base {
			hop95 = fmt.Sprintf("%+.2f", run.Overhead.P95-base.Overhead.P95)
			hop99 = fmt.Sprintf("%+.2f", run.Overhead.P99-base.Overhead.P99)
		}
		cpu, mem := "—", "—"
		if len(run.Resources) > 0 {
			worstCPU, worstMem, judged := 0.0, 0.0, false
			for _, res := range run.Resources {
				worstCPU = max(worstCPU, res.CPUScaled)
				if res.MemJudged && (!judged || res.MemGrowth > worstMem) {
					worstMem, judged = res.MemGrowth, true
				}
			}
			cpu = fmt.Sprintf("%.1f%%", worstCPU)
			if judged {
				mem = fmt.Sprintf("%+.2f%%", 100*worstMem)
			}
		}
		f2e := "—"
		if run.FaultToError.N > 0 {
			f2e = fmt.Sprintf("%.0f ms", run.FaultToError.Max)
		}
		tw.row(fmt.Sprint(run.Instances), fmt.Sprint(run.Accounting.Sent), fmt.Sprint(run.Accounting.Outcomes[ledger.OutcomeOK]),
			fmt.Sprint(errs), fmt.Sprint(run.Accounting.Outcomes[ledger.OutcomeLost]), fmt.Sprintf("%.1f", run.SentRate),
			f3(run.Latency.P50), f3(run.Latency.P95), f3(run.Latency.P99),
			f3(run.Overhead.P50), f3(run.Overhead.P95), f3(run.Overhead.P99), hop95, hop99, cpu, mem, f2e)
	}
	tw.write(w)
	fmt.Fprintln(w, "(latency and overhead in ms: plain requests of the steady phase that succeeded, outside the fault window;")
	fmt.Fprintln(w, " overhead = latency − processing_time_ms the node reported; hop = overhead percentile minus the 1-instance run's;")
	fmt.Fprintln(w, " cpu@100/s = the busiest instance's mean CPU over the steady phase, % of one core, scaled to 100 requests/s;")
	fmt.Fprintln(w, " mem growth = the largest RSS growth, mean of the last fifth vs the first fifth of a steady stretch)")
}

func firstN[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func f3(v float64) string { return fmt.Sprintf("%.2f", v) }

// baseline is the 1-instance run, or nil.
func baseline(runs []*RunReport) *RunReport {
	for _, r := range runs {
		if r.Instances == 1 {
			return r
		}
	}
	return nil
}

// table is a plain text table with right-aligned columns.
type table struct {
	head []string
	rows [][]string
}

func newTable(head ...string) *table { return &table{head: head} }

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	width := make([]int, len(t.head))
	for i, h := range t.head {
		width[i] = len([]rune(h))
	}
	for _, r := range t.rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		parts := make([]string, len(cells))
		for i, c := range cells {
			parts[i] = strings.Repeat(" ", width[i]-len([]rune(c))) + c
		}
		fmt.Fprintln(w, strings.Join(parts, "  "))
	}
	line(t.head)
	for _, r := range t.rows {
		line(r)
	}
}

// countParts lists a count per kind as "kind ×n", the kinds sorted.
func countParts(m map[string]int) []string { return sortedParts(m, "%s ×%d") }

// counterParts lists an instance's counters as "name value", sorted.
func counterParts(m map[string]float64) []string { return sortedParts(m, "%s %g") }

func sortedParts[V any](m map[string]V, format string) []string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf(format, k, m[k]))
	}
	return parts
}
