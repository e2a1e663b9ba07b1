package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
)

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
	case r.Burst != nil:
		r.writeBurst(w)
	case isFleet(r.Runs):
		r.writeFleetTable(w)
	default:
		r.writeTable(w)
	}

	for _, run := range r.Runs {
		fmt.Fprintf(w, "\n%d instance%s:\n", run.Instances, Plural(run.Instances))
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
				len(run.Accounting.Duplicates), FirstN(run.Accounting.Duplicates, 10))
		}
	}

	if r.Sweep != nil {
		fmt.Fprintln(w, "\ncriteria (the sweep's bars):")
	} else if r.Burst != nil {
		fmt.Fprintln(w, "\ncriteria (the burst's bar):")
	} else {
		fmt.Fprintln(w, "\ncriteria (the bars of README.md's Load test section):")
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
	tw := newTable("instances", "sent", "ok", "retried", "errors", "lost", "steady/s", "lat p50", "lat p95", "lat p99",
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
			fmt.Sprint(run.Accounting.Retried), fmt.Sprint(errs), fmt.Sprint(run.Accounting.Outcomes[ledger.OutcomeLost]), fmt.Sprintf("%.1f", run.SentRate),
			f3(run.Latency.P50), f3(run.Latency.P95), f3(run.Latency.P99),
			f3(run.Overhead.P50), f3(run.Overhead.P95), f3(run.Overhead.P99), hop95, hop99, cpu, mem, f2e)
	}
	tw.write(w)
	fmt.Fprintln(w, "(retried = requests whose task ran again on another node after its node failed it, whatever their end;")
	fmt.Fprintln(w, " latency and overhead in ms: plain requests of the steady phase that succeeded, outside the fault window;")
	fmt.Fprintln(w, " overhead = latency − processing_time_ms the node reported; hop = overhead percentile minus the 1-instance run's;")
	fmt.Fprintln(w, " cpu@100/s = the busiest instance's mean CPU over the steady phase, % of one core, scaled to 100 requests/s;")
	fmt.Fprintln(w, " mem growth = the largest RSS growth, mean of the last fifth vs the first fifth of a steady stretch)")
}

func FirstN[T any](s []T, n int) []T {
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

// Plural is "s" for any count but one.
func Plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
