package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// SweepReport is the sweep profile's result: one row per mode and rate.
type SweepReport struct {
	Modes           []string   `json:"modes"`
	Rates           []float64  `json:"rates"`
	WarmupS         float64    `json:"warmup_s"`
	CountedS        float64    `json:"counted_s"`
	Nodes           int        `json:"nodes"`            // echo workers of every mode
	NodeConcurrency int        `json:"node_concurrency"` // slots of each switchyard node
	LateMs          float64    `json:"late_after_ms"`    // a request sent later than this after its due time is late
	KneeMs          float64    `json:"knee_p99_ms"`
	NATSClient      string     `json:"nats_client,omitempty"`
	Rows            []SweepRow `json:"rows"`
	// Knees are, per mode that ran, the first rate whose p99 passed
	// KneeMs (0: none did).
	Knees map[string]float64 `json:"knees"`
	// Members are the instances of each switchyard mode; Counters their
	// switchyard counters over the mode (end minus start).
	Members  map[string][]*cluster.Instance           `json:"members,omitempty"`
	Counters map[string]map[string]map[string]float64 `json:"switchyard_counters,omitempty"`
	// Exited names the instances that exited while their mode ran.
	Exited []string `json:"exited,omitempty"`
	// CPUMissing says which processes' CPU was not measured, and why.
	CPUMissing []string `json:"cpu_not_measured,omitempty"`
}

// SweepRow is one step: one mode at one rate, over its counted requests
// (the warm-up's are left out of every figure but WarmupNotOK).
type SweepRow struct {
	Mode     string  `json:"mode"`
	Rate     float64 `json:"rate"`
	Expected int     `json:"expected"` // requests due in the counted window
	Sent     int     `json:"sent"`
	OK       int     `json:"ok"`
	Errors   int     `json:"errors"`   // an explicit answer that is not the echo, or a transport error
	Timeouts int     `json:"timeouts"` // no answer by the task timeout plus the grace period
	// NoOutcome and Doubles check the accounting: both must be 0.
	NoOutcome int            `json:"no_outcome"`
	Doubles   int            `json:"doubles"`
	NonOK     map[string]int `json:"non_ok"` // "503 nodes_busy", "timeout", "transport"… → count
	// Examples are the first error of each kind of NonOK, as the client
	// saw it (a transport error's text says what failed: dial, read…).
	Examples map[string]string `json:"examples,omitempty"`
	Late     int               `json:"late"` // sent more than LateMs after their due time
	MaxLagMs float64           `json:"max_lag_ms"`
	// Lag is how late every counted request went out, in ms: the
	// generator's (and the machine's) share of the latency.
	Lag stats.Dist `json:"lag_ms"`
	// Latency is from each ok request's due time to its answer, in ms.
	Latency stats.Dist `json:"latency_ms"`
	// P99VsNATS is Latency.P99 over the NATS row's at the same rate; 0
	// when there is none (or for the NATS row itself).
	P99VsNATS   float64 `json:"p99_vs_nats,omitempty"`
	MaxInFlight int     `json:"max_in_flight"` // over the whole step, warm-up included
	ConnsOpened int     `json:"conns_opened"`  // HTTP connections dialled during the step (switchyard modes)
	WarmupNotOK int     `json:"warmup_not_ok"`
	// CPU is each process's CPU over the counted window; nil when not
	// measured.
	CPU *StepCPU `json:"cpu,omitempty"`
	// Redis is what the Redis servers were asked over the counted window;
	// nil when not measured (the nats and floor modes use none).
	Redis *StepRedis `json:"redis,omitempty"`
	// InstanceAllocs is the instances' heap allocations per ok request over
	// the counted window (go_memstats_mallocs_total): steadier than the CPU
	// on a shared machine, and a cause of it. 0 when not measured.
	InstanceAllocs float64 `json:"instance_allocs_per_request,omitempty"`
}

// notOK counts the counted requests that did not come back ok.
func (r SweepRow) notOK() int { return r.Sent - r.OK }

// p99Unknown reports whether more than 1 % of the requests sent failed:
// their latency is not in the distribution, so its p99 is no p99 of what
// was sent (the 99th percentile of the requests is a failure).
func (r SweepRow) p99Unknown() bool { return r.Latency.N == 0 || 100*r.notOK() > r.Sent }

// row finds mode's row at rate, or nil.
func (s *SweepReport) row(mode string, rate float64) *SweepRow {
	for i := range s.Rows {
		if s.Rows[i].Mode == mode && s.Rows[i].Rate == rate {
			return &s.Rows[i]
		}
	}
	return nil
}

// Finish fills the figures computed across rows: the ratios to NATS and
// to the floor's CPU, and the knees.
func (s *SweepReport) Finish() {
	s.Knees = map[string]float64{}
	for i := range s.Rows {
		r := &s.Rows[i]
		if r.Mode == config.ModeNATS {
			continue
		}
		if base := s.row(config.ModeNATS, r.Rate); base != nil && base.Latency.P99 > 0 && r.Latency.N > 0 {
			r.P99VsNATS = stats.Round3(r.Latency.P99 / base.Latency.P99)
		}
	}
	for _, m := range s.Modes {
		if slices.ContainsFunc(s.Rows, func(r SweepRow) bool { return r.Mode == m }) {
			s.Knees[m] = sweepKnee(s.Rows, m, s.KneeMs)
		}
	}
	s.finishCPU()
}

// sweepKnee is the first rate (in the order run, which rises) at which
// mode's p99 passed limitMs, or at which more than 1 % of its requests
// failed, so that its p99 is a failure; 0 when no rate did.
func sweepKnee(rows []SweepRow, mode string, limitMs float64) float64 {
	for _, r := range rows {
		if r.Mode == mode && (r.p99Unknown() || r.Latency.P99 > limitMs) {
			return r.Rate
		}
	}
	return 0
}

// writeSweep is the sweep profile's part of the text report.
func (r *Report) writeSweep(w io.Writer) {
	s := r.Sweep
	fmt.Fprintf(w, "open-loop rate sweep: %d echo workers per mode; switchyard nodes with %d slots each (%d in all); each rate %.0f s warm-up (not counted), then %g s counted\n",
		s.Nodes, s.NodeConcurrency, s.Nodes*s.NodeConcurrency, s.WarmupS, s.CountedS)
	if s.NATSClient != "" {
		fmt.Fprintf(w, "nats: %s\n", s.NATSClient)
	}
	fmt.Fprintln(w)
	s.writeSweepCPU(w)
	tw := newTable("mode", "rate", "sent", "ok", "errors", "timeouts", "late", "max lag ms", "p50", "p95", "p99", "p99/NATS", "max in flight", "new conns")
	for _, row := range s.Rows {
		ratio, conns := "—", "—"
		if row.P99VsNATS > 0 {
			ratio = fmt.Sprintf("%.2f×", row.P99VsNATS)
		}
		if row.Mode != config.ModeNATS {
			conns = fmt.Sprint(row.ConnsOpened)
		}
		p50, p95, p99 := "—", "—", "—"
		if row.Latency.N > 0 {
			p50, p95, p99 = f3(row.Latency.P50), f3(row.Latency.P95), f3(row.Latency.P99)
		}
		tw.row(row.Mode, fmt.Sprintf("%g", row.Rate), fmt.Sprint(row.Sent), fmt.Sprint(row.OK), fmt.Sprint(row.Errors),
			fmt.Sprint(row.Timeouts), fmt.Sprint(row.Late), fmt.Sprintf("%.1f", row.MaxLagMs), p50, p95, p99, ratio,
			fmt.Sprint(row.MaxInFlight), conns)
	}
	tw.write(w)
	fmt.Fprintf(w, "(latency in ms from each request's due time to its answer, ok requests of the counted window; the echo\n")
	fmt.Fprintf(w, " takes no time, so this is the overhead; late = sent more than %.0f ms after its due time; max in flight\n", s.LateMs)
	fmt.Fprintf(w, " over the whole step; new conns = HTTP connections the client dialled during the step)\n")
	var knees []string
	for _, m := range s.Modes {
		k, ok := s.Knees[m]
		switch {
		case !ok:
			continue
		case k == 0:
			knees = append(knees, m+" none")
		default:
			knees = append(knees, fmt.Sprintf("%s %g/s", m, k))
		}
	}
	fmt.Fprintf(w, "p99 passes %.0f ms at: %s\n", s.KneeMs, strings.Join(knees, "; "))
	for _, row := range s.Rows {
		if len(row.NonOK) == 0 && row.WarmupNotOK == 0 {
			continue
		}
		parts := countParts(row.NonOK)
		if row.WarmupNotOK > 0 {
			parts = append(parts, fmt.Sprintf("and %d in the warm-up", row.WarmupNotOK))
		}
		fmt.Fprintf(w, "  %s at %g/s, not ok: %s\n", row.Mode, row.Rate, strings.Join(parts, ", "))
		for _, k := range slices.Sorted(maps.Keys(row.NonOK)) {
			if ex := row.Examples[k]; ex != "" && k != "timeout" {
				fmt.Fprintf(w, "    e.g. %s: %s\n", k, ex)
			}
		}
	}
	for _, m := range s.Modes {
		for _, in := range s.Members[m] {
			fmt.Fprintf(w, "  %s: instance %d %s %s pid %d", m, in.Index+1, in.Name, in.URL, in.PID)
			if cs := s.Counters[m][in.Name]; len(cs) > 0 {
				fmt.Fprintf(w, "; counters: %s", strings.Join(counterParts(cs), ", "))
			}
			fmt.Fprintln(w)
		}
	}
	for _, e := range s.Exited {
		fmt.Fprintf(w, "  warning: %s\n", e)
	}
}

// Notes say what a reader of the sweep's figures should know; the
// slots note depends on what the run saw.
func (s *SweepReport) Notes() []string {
	n := []string{
		"overhead = latency − the worker's own time; the echo handler takes none (its processing_time_ms is 0), so the latency is the overhead",
		"latency counts from each request's due time, not from when it went out: a generator that fell behind shows as latency and as late sends (no coordinated omission)",
		"a p99 leaves out the requests that did not come back ok; where more than 1 % of a step's did not, its p99 is a failure: the knee is at that rate, and a p99 bar fails",
	}
	if slices.ContainsFunc(s.Rows, func(r SweepRow) bool { return r.Mode == config.ModeFloor }) {
		n = append(n, "floor = the same client and echo nodes through a bare forwarder in its own process (HTTP/1.1 in, one WebSocket round trip to a node, JSON, nothing else: no accounts, limits, records, metrics or cluster): what any coordinator of this protocol costs on this machine; what local adds over it is switchyard's own")
	}
	slots := s.Nodes * s.NodeConcurrency
	var bound []string
	for _, r := range s.Rows {
		if r.Mode != config.ModeNATS && (r.MaxInFlight >= slots || r.NonOK["503 nodes_busy"] > 0) {
			bound = append(bound, fmt.Sprintf("%s at %g/s (up to %d in flight)", r.Mode, r.Rate, r.MaxInFlight))
		}
	}
	if len(bound) > 0 {
		n = append(n, fmt.Sprintf("the nodes' slots (%d nodes × %d = %d) may be the limit of: %s; requests beyond the free slots wait in the coordinator's queue (then 503 nodes_busy), so those steps measure the slots as well as the coordinator (raise --node-concurrency to tell them apart)",
			s.Nodes, s.NodeConcurrency, slots, strings.Join(bound, ", ")))
	} else if slices.ContainsFunc(s.Rows, func(r SweepRow) bool { return r.Mode != config.ModeNATS }) {
		n = append(n, fmt.Sprintf("no switchyard step had as many requests in flight as the nodes have slots (%d): the slots were never the limit", slots))
	}
	return n
}
