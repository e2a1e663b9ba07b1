package load

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/burst"
	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/fleet"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/sweep"
)

// Run runs every configuration of cfg (one per entry of Instances, in
// order) and judges them. progress, if not nil, gets the live progress
// lines. The error is for a run that could not be carried out (an
// instance would not start, Redis is unreachable…); a run that was carried
// out and missed a bar returns a report with Pass false and no error.
func Run(ctx context.Context, cfg config.Config, progress io.Writer) (*report.Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	var err error
	if progress == nil {
		progress = io.Discard
	}
	rep := &report.Report{Tool: "switchyard loadtest", Started: time.Now(), Profile: cfg.Profile, Mode: "spawn",
		Shape: cfg.Summary(), Params: report.ParamsOf(cfg), Host: report.HostInfo()}
	if !cfg.Spawn() {
		rep.Mode = "target"
	}
	if err := cluster.RaiseFileLimit(cfg); err != nil {
		return nil, err
	}

	var bin, logDir string
	if cfg.Spawn() && cfg.NeedsInstances() {
		logDir = cfg.LogDir
		tempLogs := logDir == ""
		if tempLogs {
			if logDir, err = os.MkdirTemp("", "switchyard-loadtest-"); err != nil {
				return nil, err
			}
		} else if err := os.MkdirAll(logDir, 0o755); err != nil {
			return nil, err
		}
		defer func() {
			// Keep the instances' logs when something needs explaining.
			if tempLogs && rep.Pass {
				_ = os.RemoveAll(logDir)
			} else {
				rep.LogDir = logDir
			}
		}()
		bin = cfg.Switchyard
		if bin == "" {
			fmt.Fprintln(progress, "building switchyard (go build ./cmd/switchyard)…")
			if bin, err = cluster.BuildSwitchyard(ctx, logDir); err != nil {
				return nil, err
			}
		}
		if cfg.RedisCluster {
			// One cluster for every run of the invocation (each run has
			// its own namespace), discarded at the end: on an error, an
			// interrupt (SIGINT cancels ctx) or a normal exit.
			rc, err := cluster.StartRedisCluster(ctx, logDir, progress)
			if err != nil {
				return nil, err
			}
			defer rc.Stop()
			cfg.RedisURL = rc.URL()
			rep.Params.RedisURL = cfg.RedisURL
		}
	}
	if cfg.NeedsInstances() {
		rep.Redis = cluster.DescribeRedis(ctx, cfg)
	}

	if cfg.Sweep {
		rep.Sweep, err = sweep.Run(ctx, cfg, bin, logDir, progress)
		rep.Finished = time.Now()
		if err != nil {
			return rep, err
		}
		rep.Criteria = report.EvaluateSweep(rep.Sweep, cfg.Bars)
		rep.Pass = report.Passed(rep.Criteria)
		rep.Notes = rep.Sweep.Notes()
		if ctx.Err() != nil {
			rep.Pass = false
			rep.Notes = append(rep.Notes, "the load test was interrupted: the figures cover only part of the sweep")
		}
		return rep, nil
	}

	if cfg.Burst {
		rep.Burst, err = burst.Run(ctx, cfg, bin, logDir, progress)
		rep.Finished = time.Now()
		if err != nil {
			return rep, err
		}
		rep.Criteria = report.EvaluateBurst(rep.Burst)
		rep.Pass = report.Passed(rep.Criteria)
		if ctx.Err() != nil {
			rep.Pass = false
			rep.Notes = append(rep.Notes, "the load test was interrupted: the figures cover only part of the burst")
		}
		return rep, nil
	}

	for _, n := range cfg.Instances {
		fmt.Fprintf(progress, "== %d instance%s ==\n", n, report.Plural(n))
		rr, err := runOne(ctx, cfg, n, bin, logDir, progress)
		if err != nil {
			rep.Finished = time.Now()
			return rep, fmt.Errorf("the %d-instance run: %w", n, err)
		}
		rep.Runs = append(rep.Runs, rr)
		if ctx.Err() != nil {
			break
		}
	}
	rep.Criteria = report.Evaluate(rep.Runs, cfg.Bars)
	rep.Pass = report.Passed(rep.Criteria)
	rep.Notes = report.Notes(cfg)
	rep.Finished = time.Now()
	if ctx.Err() != nil {
		rep.Pass = false
		rep.Notes = append(rep.Notes, "the load test was interrupted: the figures cover only part of the run")
	}
	return rep, nil
}

// runOne runs one configuration of n instances.
func runOne(ctx context.Context, cfg config.Config, n int, bin, logDir string, progress io.Writer) (*report.RunReport, error) {
	var c *cluster.Cluster
	var err error
	if cfg.Spawn() {
		if c, err = cluster.Start(ctx, cfg, n, bin, logDir); err != nil {
			return nil, err
		}
	} else {
		c = cluster.Targets(cfg, n)
	}
	defer c.Close()

	t0 := time.Now()
	pids := make([]int, 0, n+1)
	for _, in := range c.Instances() {
		pids = append(pids, in.PID)
	}
	pids = append(pids, os.Getpid())
	s := cluster.NewSampler(t0, pids)
	sctx, stopSampler := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { s.Run(sctx) })
	defer func() {
		stopSampler()
		bg.Wait()
	}()

	l := ledger.New(t0)
	f := fleet.New(cfg, c, l, cluster.RandHex(4))
	defer f.Stop()
	r := newRunner(cfg, c, l, f, s, progress, t0)
	r.setPhase("connect")
	connectStart := time.Now()
	if err := f.Start(ctx); err != nil {
		return nil, err
	}
	err = f.AwaitRegistered(ctx, 60*time.Second, func(done int64) {
		el := time.Since(connectStart)
		r.lines.Line(fmt.Sprintf("[%d instance%s] %-9s %6v  registered %d of %d nodes (%.0f/s)", n, report.Plural(n), "connect",
			el.Round(time.Second), done, cfg.Nodes, float64(done)/el.Seconds()))
	})
	r.lines.End()
	if err != nil {
		return nil, err
	}
	registered := time.Since(connectStart)
	if err := f.AwaitDirectory(ctx, 30*time.Second+time.Duration(cfg.Nodes)*time.Millisecond); err != nil {
		return nil, err
	}
	listed := time.Since(connectStart)
	fmt.Fprintf(progress, "[%d instance%s] %d nodes registered in %.1f s, listed by every instance after %.1f s\n",
		n, report.Plural(n), cfg.Nodes, registered.Seconds(), listed.Seconds())

	r.fault = report.FaultReport{Kind: cfg.Fault, Instance: cfg.Victim(n)}
	if cfg.Fault != config.FaultNone && n == 1 {
		r.fault.Skipped = "a 1-instance run has no other instance to fail over to"
	}
	r.event("%d nodes registered (in %.1f s, connecting %g a second) and listed by every instance (after %.1f s)",
		cfg.Nodes, registered.Seconds(), cfg.ConnectRate, listed.Seconds())
	var fr *fleetRun
	if cfg.Fleet {
		fr = newFleetRun(cfg, c, r, s, l, t0, pids, f)
		fr.idle(ctx)
		r.onSteadyStart, r.onSteadyEnd = fr.steadyStart(ctx), fr.steadyEnd(ctx)
	}
	r.run(ctx)

	stopSampler()
	bg.Wait()
	samples := make([][]cluster.Sample, n)
	for i := range n {
		samples[i] = s.Result(i)
	}
	recs := l.Records()
	acc := l.Accounting()
	// The node id in a result must be the node that ran the request
	// (only the assigned connection answers).
	var mismatched []int64
	for _, rec := range recs {
		if rec.NodeID == "" {
			continue
		}
		switch idx := f.NodeIndex(rec.NodeID); {
		case rec.Node < 0:
			rec.Node = idx
		case idx != rec.Node:
			mismatched = append(mismatched, rec.ID)
		}
	}
	if len(mismatched) > 0 {
		r.event("warning: %d results name another node than the one that ran them (ids %v)", len(mismatched), report.FirstN(mismatched, 10))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := report.BuildRun(cfg, c.Instances(), recs, acc.Doubles, r.fault, r.marks, r.events, samples, s.Result(n), time.Duration(r.maxLag.Load()))
	rr.Counters = r.counters
	if fr != nil {
		rr.Fleet = fr.finish(registered, listed, recs)
		if fr.rep.Loaded.Measured {
			rr.Events = append(rr.Events, report.Event{T: fr.rep.Loaded.ToS, What: "loaded window ends: " + fr.rep.Loaded.Brief()})
			slices.SortStableFunc(rr.Events, func(a, b report.Event) int { return cmp.Compare(a.T, b.T) })
		}
	}
	return rr, nil
}
