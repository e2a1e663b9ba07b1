package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
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

// snapshot is what a window's end minus its start is computed from.
type snapshot struct {
	taken    bool
	at       time.Time
	cpu      []time.Duration // per pid; the last pid is the load test itself
	rss      []int64
	ok       []bool
	redis    map[string]int64
	redisErr error
}

// fleetRun drives the fleet profile's windows around the runner.
type fleetRun struct {
	cfg    config.Config
	c      *cluster.Cluster
	r      *runner
	s      *cluster.Sampler
	ledger *ledger.Ledger
	t0     time.Time
	pids   []int // instances (0 for a --target), then this process

	meter     *cluster.RedisMeter
	stopMeter context.CancelFunc
	wg        sync.WaitGroup

	rep                  FleetReport
	idleFrom, idleTo     snapshot
	loadedFrom, loadedTo snapshot
}

func newFleetRun(cfg config.Config, c *cluster.Cluster, r *runner, s *cluster.Sampler, l *ledger.Ledger, t0 time.Time, pids []int, f *fleet) *fleetRun {
	fr := &fleetRun{cfg: cfg, c: c, r: r, s: s, ledger: l, t0: t0, pids: pids}
	fr.rep = FleetReport{Nodes: cfg.Nodes, ConnectRate: cfg.ConnectRate, Redis: cfg.RedisURL, RedisShared: !cfg.RedisCluster}
	for i := range c.Instances() {
		fr.rep.NodesPerInstance = append(fr.rep.NodesPerInstance, f.countOn(i))
	}
	return fr
}

// idle waits out the settle pause and the idle window, printing progress
// lines, and measures the window. The Redis meter runs from here until
// finish.
func (fr *fleetRun) idle(ctx context.Context) {
	if fr.c.Redis() != nil {
		fr.meter = cluster.NewRedisMeter(fr.c.Redis(), fr.t0)
		mctx, cancel := context.WithCancel(ctx)
		fr.stopMeter = cancel
		fr.wg.Go(func() { fr.meter.Run(mctx) })
	}
	fr.r.extra = fr.progressExtra
	if fr.cfg.Settle > 0 {
		fr.r.event("settling for %v before the idle window", fr.cfg.Settle)
		if !fr.wait(ctx, "settle", fr.cfg.Settle) {
			return
		}
	}
	fr.r.event("idle window: %v with %d nodes connected and no requests", fr.cfg.Idle, fr.cfg.Nodes)
	fr.idleFrom = fr.snapshot(ctx)
	if !fr.wait(ctx, "idle", fr.cfg.Idle) {
		return
	}
	fr.idleTo = fr.snapshot(ctx)
	w := fr.window(fr.idleFrom, fr.idleTo, nil)
	fr.r.event("idle window ends: %s", w.brief())
}

// wait prints a progress line a second for d; false if ctx ended first.
func (fr *fleetRun) wait(ctx context.Context, phase string, d time.Duration) bool {
	fr.r.setPhase(phase)
	end := time.Now().Add(d)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	defer fr.r.endLine()
	n := len(fr.c.Instances())
	for {
		left := time.Until(end)
		if left <= 0 {
			return ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(left):
			return ctx.Err() == nil
		case <-t.C:
			elapsed := time.Since(time.Unix(0, fr.r.phaseStart.Load())).Round(time.Second)
			fr.r.line(fmt.Sprintf("[%d instance%s] %-9s %6v/%v  nodes %d  %s", n, plural(n), phase, elapsed, d, fr.cfg.Nodes, fr.progressExtra()))
		}
	}
}

// progressExtra is the CPU of each instance and of the load test over the
// last second, and Redis commands/s.
func (fr *fleetRun) progressExtra() string {
	var b strings.Builder
	b.WriteString("cpu")
	for i := range fr.c.Instances() {
		if x, ok := fr.s.Latest(i); ok {
			fmt.Fprintf(&b, " %.1f%%", x.CPU)
		} else {
			b.WriteString(" —")
		}
	}
	if x, ok := fr.s.Latest(len(fr.pids) - 1); ok {
		fmt.Fprintf(&b, " (load test %.0f%%)", x.CPU)
	}
	if fr.meter != nil {
		if v := fr.meter.Latest(); v >= 0 {
			fmt.Fprintf(&b, "  redis %.0f cmd/s", v)
		}
	}
	return b.String()
}

// steadyStart and steadyEnd bracket the loaded window (the runner's
// steady phase).
func (fr *fleetRun) steadyStart(ctx context.Context) func() {
	return func() { fr.loadedFrom = fr.snapshot(ctx) }
}

func (fr *fleetRun) steadyEnd(ctx context.Context) func() {
	return func() { fr.loadedTo = fr.snapshot(ctx) }
}

// snapshot reads every process's CPU time and RSS, and every Redis
// server's command count.
func (fr *fleetRun) snapshot(ctx context.Context) snapshot {
	sn := snapshot{taken: true, at: time.Now(), cpu: make([]time.Duration, len(fr.pids)),
		rss: make([]int64, len(fr.pids)), ok: make([]bool, len(fr.pids))}
	if fr.c.Redis() != nil {
		sn.redis, sn.redisErr = cluster.RedisCommands(ctx, fr.c.Redis())
	}
	for i, pid := range fr.pids {
		if pid == 0 || (i < len(fr.c.Instances()) && fr.c.Instances()[i].Exited()) {
			continue
		}
		cpu, err1 := cluster.ProcCPU(pid)
		rss, err2 := cluster.ProcRSS(pid)
		sn.cpu[i], sn.rss[i], sn.ok[i] = cpu, rss, err1 == nil && err2 == nil
	}
	// Read at the moment the figures were, not after Redis answered.
	sn.at = time.Now()
	return sn
}

// window computes a window's figures; samples (per pid, nil while the run
// goes on) give each instance's busiest second.
func (fr *fleetRun) window(a, b snapshot, samples [][]cluster.Sample) Window {
	w := Window{Busiest: -1}
	if !a.taken || !b.taken {
		return w
	}
	w.Measured = true
	w.FromS, w.ToS = stats.Round3(a.at.Sub(fr.t0).Seconds()), stats.Round3(b.at.Sub(fr.t0).Seconds())
	dt := b.at.Sub(a.at)
	pct := func(i int) float64 { return stats.Round3(100 * float64(b.cpu[i]-a.cpu[i]) / float64(dt)) }
	for i, in := range fr.c.Instances() {
		if fr.pids[i] == 0 {
			continue // a --target: not ours to read
		}
		iw := InstanceWindow{Index: i, Name: in.Name, Gone: !a.ok[i] || !b.ok[i]}
		if !iw.Gone {
			iw.CPUMean, iw.RSSStartKiB, iw.RSSEndKiB = pct(i), a.rss[i], b.rss[i]
		}
		if i < len(samples) {
			for _, x := range samples[i] {
				// A sample covers the second before its time: count those
				// wholly inside the window.
				if x.T-1 >= w.FromS-0.05 && x.T <= w.ToS+0.05 {
					iw.CPUMax = max(iw.CPUMax, x.CPU)
				}
			}
		}
		iw.CPUMax = max(iw.CPUMax, iw.CPUMean)
		w.Instances = append(w.Instances, iw)
	}
	for i, iw := range w.Instances {
		if !iw.Gone && (w.Busiest < 0 || iw.CPUMean > w.Instances[w.Busiest].CPUMean) {
			w.Busiest = i
		}
	}
	if self := len(fr.pids) - 1; a.ok[self] && b.ok[self] {
		w.LoadGenCPU = pct(self)
	}
	switch {
	case fr.c.Redis() == nil:
		w.Redis.Error = "not measured: the --target instances' Redis is not known to the load test"
	case a.redisErr != nil || b.redisErr != nil:
		w.Redis.Error = fmt.Sprint(errorsOf(a.redisErr, b.redisErr))
	default:
		total, by := cluster.CommandsBetween(a.redis, b.redis)
		w.Redis = RedisWindow{Measured: true, Servers: len(by), Commands: total, PerSec: stats.Round3(float64(total) / dt.Seconds()),
			ByServer: map[string]float64{}}
		for addr, n := range by {
			w.Redis.ByServer[addr] = stats.Round3(float64(n) / dt.Seconds())
		}
	}
	return w
}

func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// brief is a window's figures in one line, for the timeline.
func (w Window) brief() string {
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

// finish stops the meter and returns the report of the run.
func (fr *fleetRun) finish(registered, listed time.Duration, recs []*ledger.Record) *FleetReport {
	if fr.stopMeter != nil {
		fr.stopMeter()
		fr.wg.Wait()
		fr.rep.RedisSeries = fr.meter.Result()
	}
	samples := make([][]cluster.Sample, len(fr.pids))
	for i := range fr.pids {
		samples[i] = fr.s.Result(i)
	}
	fr.rep.RegisteredS, fr.rep.ListedS = stats.Round3(registered.Seconds()), stats.Round3(listed.Seconds())
	fr.rep.Idle = fr.window(fr.idleFrom, fr.idleTo, samples)
	fr.rep.Loaded = fr.window(fr.loadedFrom, fr.loadedTo, samples)
	for _, r := range recs {
		switch {
		case r.Phase == ledger.PhaseSteady:
			fr.rep.Loaded.Sent++
		case fr.rep.Idle.Measured && r.SentMs >= 1000*fr.rep.Idle.FromS && r.SentMs <= 1000*fr.rep.Idle.ToS:
			fr.rep.Idle.Sent++ // none is sent then: a count here is a bug
		}
	}
	return &fr.rep
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

// fleetNotes explain the fleet profile's figures.
func fleetNotes(cfg config.Config) []string {
	n := []string{
		"fleet profile: CPU is each process's user+system time over the window (/proc/<pid>/stat) divided by its length, % of one core; RSS from /proc/<pid>/status",
		"Redis commands/s is total_commands_processed (INFO stats) at the window's end minus its start, summed over every server (masters and replicas of a cluster); it includes the load test's own INFO, one per server per second",
		"the loaded window's CPU and Redis figures are reported, not judged; its requests are judged: every one must get exactly one outcome, and succeed",
	}
	if local := cfg.LocalNodes(); local < cfg.Nodes {
		n = append(n, fmt.Sprintf("the load test's own process holds %d of the %d nodes (Go SDK agents), the ones the loaded window's requests go to; "+
			"helper processes (at most %d nodes each, --nodes-per-process) hold the other %d, idle throughout (a task type of their own). "+
			"The load test's CPU is its own process's; all of them share this machine's cores with the instances", local, cfg.Nodes, cfg.NodesPerProcess, cfg.Nodes-local))
	} else {
		n = append(n, fmt.Sprintf("the load test's own process holds all %d nodes (Go SDK agents); its CPU, printed beside the instances', shares this machine's cores with them", cfg.Nodes))
	}
	if cfg.Spawn() && !cfg.RedisCluster {
		n = append(n, fmt.Sprintf("the Redis at %s was not started by the load test and may carry other clients' traffic (other tests, other programs): all of it is counted, so its commands/s are an upper bound for switchyard's own", cfg.RedisURL))
	}
	if !cfg.Spawn() {
		n = append(n, "target mode: CPU, memory and Redis are not measured (the processes and the Redis are not ours)")
	}
	return n
}
