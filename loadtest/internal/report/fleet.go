package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
)

// FleetReport is the fleet profile's part of a run: how the nodes came
// up, then the idle and the loaded window.
type FleetReport struct {
	Nodes            int     `json:"nodes"`
	NodesPerInstance []int   `json:"nodes_per_instance"`
	ConnectRate      float64 `json:"connect_rate"`
	RegisteredS      float64 `json:"registered_s"` // first connect → every node registered
	ListedS          float64 `json:"listed_s"`     // first connect → every instance lists every node
	// Redis names the Redis measured; RedisShared: not started by the load
	// test, so other clients' commands count too.
	Redis       string                `json:"redis"`
	RedisShared bool                  `json:"redis_shared"`
	Idle        Window                `json:"idle"`
	Loaded      Window                `json:"loaded"`
	RedisSeries []cluster.RedisSample `json:"redis_samples,omitempty"` // commands/s every second, both windows
}

// Window is one measured stretch of a fleet run.
type Window struct {
	Measured bool    `json:"measured"` // false: the run ended (interrupted) before it did
	FromS    float64 `json:"from_s"`
	ToS      float64 `json:"to_s"`
	// Instances is empty when CPU and RSS are not measured (--target).
	Instances  []InstanceWindow `json:"instances,omitempty"`
	Busiest    int              `json:"busiest"` // index into Instances of the highest CPU mean; -1 if none
	LoadGenCPU float64          `json:"loadgen_cpu"`
	Redis      RedisWindow      `json:"redis"`
	Sent       int              `json:"sent"` // requests sent in the window
}

// InstanceWindow is one instance's resource use over a window.
type InstanceWindow struct {
	Index       int     `json:"index"`
	Name        string  `json:"name"`
	CPUMean     float64 `json:"cpu_mean"` // % of one core: CPU time over the window / its length
	CPUMax      float64 `json:"cpu_max"`  // the busiest second
	RSSStartKiB int64   `json:"rss_start_kib"`
	RSSEndKiB   int64   `json:"rss_end_kib"`
	Gone        bool    `json:"gone,omitempty"` // the process ended during the window
}

// RedisWindow is the commands every Redis server processed over a window
// (INFO stats total_commands_processed, end minus start).
type RedisWindow struct {
	Measured bool               `json:"measured"`
	Servers  int                `json:"servers"`
	Commands int64              `json:"commands"`
	PerSec   float64            `json:"per_s"`
	ByServer map[string]float64 `json:"per_s_by_server,omitempty"`
	Error    string             `json:"error,omitempty"`
}

// Busy is the busiest instance's figures, if measured.
func (w Window) Busy() (InstanceWindow, bool) {
	if w.Busiest < 0 || w.Busiest >= len(w.Instances) {
		return InstanceWindow{}, false
	}
	return w.Instances[w.Busiest], true
}

// Brief is a window's figures in one line, for the timeline.
func (w Window) Brief() string {
	var parts []string
	if in, ok := w.Busy(); ok {
		parts = append(parts, fmt.Sprintf("busiest instance %s %.1f%% of one core", in.Name, in.CPUMean))
	}
	if w.Redis.Measured {
		parts = append(parts, fmt.Sprintf("Redis %.0f commands/s", w.Redis.PerSec))
	}
	if len(parts) == 0 {
		return "not measured"
	}
	return strings.Join(parts, ", ")
}

// servers lists a window's servers in order, for the text report.
func (w RedisWindow) servers() []string {
	addrs := make([]string, 0, len(w.ByServer))
	for a := range w.ByServer {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	return addrs
}

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
