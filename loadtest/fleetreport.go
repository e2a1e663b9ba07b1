package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
)

// isFleet reports whether the runs are the fleet profile's.
func isFleet(runs []*RunReport) bool {
	for _, r := range runs {
		if r.Fleet != nil {
			return true
		}
	}
	return false
}

// writeFleetTable is the fleet profile's table of the runs: the idle and
// the loaded window side by side.
func (r *Report) writeFleetTable(w io.Writer) {
	tw := newTable("instances", "nodes", "registered", "idle cpu", "idle redis/s", "loaded cpu", "loaded redis/s",
		"sent", "ok", "errors", "lost", "lat p50", "lat p99", "load test cpu idle/loaded")
	for _, run := range r.Runs {
		f := run.Fleet
		if f == nil {
			continue
		}
		errs := 0
		for k, n := range run.Accounting.Outcomes {
			if k != ledger.OutcomeOK && k != ledger.OutcomeLost {
				errs += n
			}
		}
		tw.row(fmt.Sprint(run.Instances), fmt.Sprint(f.Nodes), fmt.Sprintf("%.1f s", f.RegisteredS),
			busiestCell(f.Idle), redisCell(f.Idle), busiestCell(f.Loaded), redisCell(f.Loaded),
			fmt.Sprint(run.Accounting.Sent), fmt.Sprint(run.Accounting.Outcomes[ledger.OutcomeOK]), fmt.Sprint(errs),
			fmt.Sprint(run.Accounting.Outcomes[ledger.OutcomeLost]), f3(run.Latency.P50), f3(run.Latency.P99),
			loadGenCell(f))
	}
	tw.write(w)
	fmt.Fprintln(w, "(cpu = the busiest instance's mean CPU over the window, % of one core (#: which instance);")
	fmt.Fprintln(w, " redis/s = commands every Redis server processed over the window, per second (INFO stats);")
	fmt.Fprintln(w, " registered = from the first node's connect until every node had registered; latency in ms, loaded window)")
}

func busiestCell(w Window) string {
	if !w.Measured {
		return "—"
	}
	in, ok := w.Busy()
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.2f%% (#%d)", in.CPUMean, in.Index+1)
}

func redisCell(w Window) string {
	if !w.Measured || !w.Redis.Measured {
		return "—"
	}
	return fmt.Sprintf("%.0f", w.Redis.PerSec)
}

func loadGenCell(f *FleetReport) string {
	cell := func(w Window) string {
		if !w.Measured {
			return "—"
		}
		return fmt.Sprintf("%.0f%%", w.LoadGenCPU)
	}
	return cell(f.Idle) + " / " + cell(f.Loaded)
}

// writeFleetRun is one fleet run's detail: the registration, then each
// window per instance.
func writeFleetRun(w io.Writer, run *RunReport) {
	f := run.Fleet
	per := make([]string, len(f.NodesPerInstance))
	for i, n := range f.NodesPerInstance {
		per[i] = fmt.Sprint(n)
	}
	achieved := ""
	if f.RegisteredS > 0 {
		achieved = fmt.Sprintf(" (%.0f/s)", float64(f.Nodes)/f.RegisteredS)
	}
	fmt.Fprintf(w, "  registration: %d nodes (%s per instance), connecting at most %g a second: all registered after %.1f s%s, listed by every instance after %.1f s\n",
		f.Nodes, strings.Join(per, "/"), f.ConnectRate, f.RegisteredS, achieved, f.ListedS)
	writeWindow(w, "idle", f.Idle, f, run)
	writeWindow(w, "loaded", f.Loaded, f, run)
	if run.Streams.N > 0 {
		fmt.Fprintf(w, "  streams: %d ok, latency p50 %.0f p99 %.0f ms\n", run.Streams.N, run.Streams.P50, run.Streams.P99)
	}
}

func writeWindow(w io.Writer, name string, win Window, f *FleetReport, run *RunReport) {
	if !win.Measured {
		fmt.Fprintf(w, "  %s window: not measured (the run ended before it did)\n", name)
		return
	}
	d := win.ToS - win.FromS
	fmt.Fprintf(w, "  %s window %.1f–%.1f s (%.1f s", name, win.FromS, win.ToS, d)
	if name == "loaded" {
		fmt.Fprintf(w, ", %d requests sent, %.1f/s, worst send lag %.1f ms", win.Sent, run.SentRate, run.MaxLagMs)
	} else {
		fmt.Fprintf(w, ", %d requests", win.Sent)
	}
	fmt.Fprintln(w, "):")
	for _, in := range win.Instances {
		if in.Gone {
			fmt.Fprintf(w, "    instance %d %s: exited during the window\n", in.Index+1, in.Name)
			continue
		}
		fmt.Fprintf(w, "    instance %d %s: cpu %.2f%% of one core (busiest second %.1f%%), rss %d → %d KiB\n",
			in.Index+1, in.Name, in.CPUMean, in.CPUMax, in.RSSStartKiB, in.RSSEndKiB)
	}
	if in, ok := win.Busy(); ok {
		fmt.Fprintf(w, "    busiest: instance %d, %.2f%% of one core; the load test's own process %.1f%%\n", in.Index+1, in.CPUMean, win.LoadGenCPU)
	} else if len(win.Instances) == 0 {
		fmt.Fprintln(w, "    cpu: not measured (the instances were not started by this program)")
	}
	if win.Redis.Measured {
		parts := make([]string, 0, len(win.Redis.ByServer))
		for _, a := range win.Redis.servers() {
			parts = append(parts, fmt.Sprintf("%s %.0f", a, win.Redis.ByServer[a]))
		}
		shared := ""
		if f.RedisShared {
			shared = "; shared Redis: other clients' commands included"
		}
		fmt.Fprintf(w, "    redis: %.0f commands/s (%d over the window; %s%s)\n", win.Redis.PerSec, win.Redis.Commands, strings.Join(parts, ", "), shared)
	} else {
		fmt.Fprintf(w, "    redis: %s\n", win.Redis.Error)
	}
}
