package load

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/fleet"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

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

	rep                  report.FleetReport
	idleFrom, idleTo     snapshot
	loadedFrom, loadedTo snapshot
}

func newFleetRun(cfg config.Config, c *cluster.Cluster, r *runner, s *cluster.Sampler, l *ledger.Ledger, t0 time.Time, pids []int, f *fleet.Nodes) *fleetRun {
	fr := &fleetRun{cfg: cfg, c: c, r: r, s: s, ledger: l, t0: t0, pids: pids}
	fr.rep = report.FleetReport{Nodes: cfg.Nodes, ConnectRate: cfg.ConnectRate, Redis: cfg.RedisURL, RedisShared: !cfg.RedisCluster}
	for i := range c.Instances() {
		fr.rep.NodesPerInstance = append(fr.rep.NodesPerInstance, f.CountOn(i))
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
	fr.r.event("idle window ends: %s", w.Brief())
}

// wait prints a progress line a second for d; false if ctx ended first.
func (fr *fleetRun) wait(ctx context.Context, phase string, d time.Duration) bool {
	fr.r.setPhase(phase)
	end := time.Now().Add(d)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	defer fr.r.lines.End()
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
			fr.r.lines.Line(fmt.Sprintf("[%d instance%s] %-9s %6v/%v  nodes %d  %s", n, report.Plural(n), phase, elapsed, d, fr.cfg.Nodes, fr.progressExtra()))
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
func (fr *fleetRun) window(a, b snapshot, samples [][]cluster.Sample) report.Window {
	w := report.Window{Busiest: -1}
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
		iw := report.InstanceWindow{Index: i, Name: in.Name, Gone: !a.ok[i] || !b.ok[i]}
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
		w.Redis = report.RedisWindow{Measured: true, Servers: len(by), Commands: total, PerSec: stats.Round3(float64(total) / dt.Seconds()),
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

// finish stops the meter and returns the report of the run.
func (fr *fleetRun) finish(registered, listed time.Duration, recs []*ledger.Record) *report.FleetReport {
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
