package sweep

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/fleet"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
	"github.com/switchyard-dev/switchyard/sdk"
)

// Run runs every mode of cfg in turn, every rate in each, with progress
// lines on progress; bin is the switchyard binary the local and cross
// modes start, logDir where their logs go. A mode that could not be set
// up ends the sweep with an error and the rows so far. cfg must be valid,
// its defaults filled.
func Run(ctx context.Context, cfg config.Config, bin, logDir string, progress io.Writer) (*report.SweepReport, error) {
	s := &report.SweepReport{Modes: cfg.Modes, Rates: cfg.Rates, WarmupS: config.SweepWarmup.Seconds(), CountedS: cfg.Duration.Seconds(),
		Nodes: cfg.Nodes, NodeConcurrency: cfg.NodeConcurrency, LateMs: stats.Ms(config.SweepLate), KneeMs: config.SweepKneeMs,
		Members: map[string][]*cluster.Instance{}, Counters: map[string]map[string]map[string]float64{}}
	defer s.Finish()
	r := &runner{cfg: cfg, rep: s, progress: progress}
	for _, mode := range cfg.Modes {
		fmt.Fprintf(progress, "== sweep: %s ==\n", mode)
		var err error
		switch mode {
		case config.ModeNATS:
			err = r.nats(ctx)
		case config.ModeFloor:
			err = r.floor(ctx)
		default:
			err = r.switchyard(ctx, mode, bin, logDir)
		}
		if err != nil {
			return s, fmt.Errorf("the sweep's %s mode: %w", mode, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return s, nil
}

// runner is one sweep under way: its report, filled a mode at a time.
type runner struct {
	cfg      config.Config
	rep      *report.SweepReport
	progress io.Writer
}

// steps runs every rate against t, stopping early if ctx ends; dials
// counts the connections the mode's client opens, probe reads the CPU of
// the mode's processes (the load test's own is added here).
func (r *runner) steps(ctx context.Context, mode string, t target, dials *atomic.Int64, m meters) {
	m.probe.Procs = append(m.probe.Procs, cluster.ProbeProc{Role: cluster.RoleLoadTest, Name: "load test", PID: os.Getpid()})
	for _, rate := range r.cfg.Rates {
		before := dials.Load()
		row := runStep(ctx, r.cfg, mode, rate, t, r.progress, m)
		row.ConnsOpened = int(dials.Load() - before)
		r.rep.Rows = append(r.rep.Rows, row)
		if ctx.Err() != nil {
			return
		}
	}
}

// nats runs the nats mode: the embedded NATS baseline.
func (r *runner) nats(ctx context.Context) error {
	cfg := r.cfg
	b, err := startNATS(cfg.Nodes)
	if err != nil {
		return err
	}
	defer b.close()
	r.rep.NATSClient = natsClientNote
	fmt.Fprintf(r.progress, "[sweep nats] embedded nats-server at %s, %d echo workers in one queue group\n", b.srv.ClientURL(), cfg.Nodes)
	r.steps(ctx, config.ModeNATS, b, new(atomic.Int64), meters{probe: &cluster.Probe{}})
	return nil
}

// switchyard runs the local mode (one instance) or the cross mode (two
// sharing Redis and PostgreSQL: every node on the first, every request to
// the second).
func (r *runner) switchyard(ctx context.Context, mode, bin, logDir string) error {
	cfg, s := r.cfg, r.rep
	n := 1
	if mode == config.ModeCross {
		n = 2
	}
	c, err := cluster.Start(ctx, cfg, n, bin, logDir)
	if err != nil {
		return err
	}
	defer c.Close()
	home, via := c.Instances()[0], c.Instances()[n-1]
	s.Members[mode] = c.Instances()

	capability := "loadtest." + cluster.RandHex(4) + ".echo"
	start := time.Now()
	nodes, err := fleet.StartEcho(ctx, cfg.Nodes, cfg.NodeConcurrency, home.WSURL(), c.NodeKeys(), capability)
	if err != nil {
		return err
	}
	defer nodes.Stop()
	if err := nodes.AwaitRegistered(ctx, 30*time.Second); err != nil {
		return err
	}
	hc, dials := sweepHTTPClient()
	defer hc.CloseIdleConnections()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = via.AwaitListed(lctx, hc, capability, cfg.Nodes, 50*time.Millisecond)
	cancel()
	if err != nil {
		return fmt.Errorf("%w after 30s", err)
	}
	fmt.Fprintf(r.progress, "[sweep %s] %d echo nodes on %s registered and listed by %s in %.1f s; requests go to %s\n",
		mode, cfg.Nodes, home.Name, via.Name, time.Since(start).Seconds(), via.Name)

	before := map[string]map[string]float64{}
	for _, in := range c.Instances() {
		if m, err := cluster.ScrapeCounters(ctx, hc, in.URL); err == nil {
			before[in.Name] = m
		}
	}
	target := &switchyardTarget{taskType: capability}
	for _, k := range c.ClientKeys() {
		target.clients = append(target.clients, sdk.NewClient(via.URL, k, sdk.WithHTTPClient(hc)))
	}
	probe := &cluster.Probe{}
	for _, in := range c.Instances() {
		probe.Procs = append(probe.Procs, cluster.ProbeProc{Role: cluster.RoleInstance, Name: in.Name, PID: in.PID})
	}
	servers, missing := c.ServerProcs(ctx)
	probe.Procs = append(probe.Procs, servers...)
	for _, m := range missing {
		if !slices.Contains(s.CPUMissing, m) {
			s.CPUMissing = append(s.CPUMissing, m)
		}
	}
	r.steps(ctx, mode, target, dials, meters{probe: probe,
		redis: func(ctx context.Context) (map[string]int64, error) { return cluster.RedisCommandCalls(ctx, c.Redis()) },
		mallocs: func(ctx context.Context) (float64, error) {
			var sum float64
			for _, in := range c.Instances() {
				v, err := cluster.ScrapeMallocs(ctx, hc, in.URL)
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		}})

	s.Counters[mode] = map[string]map[string]float64{}
	for _, in := range c.Instances() {
		if in.Exited() {
			s.Exited = append(s.Exited, fmt.Sprintf("%s (%s mode) exited unexpectedly (%v); its log: %s", in.Name, mode, in.Err(), in.Log))
			continue
		}
		m, err := cluster.ScrapeCounters(ctx, hc, in.URL)
		if err != nil {
			continue
		}
		for k, v := range m {
			if d := v - before[in.Name][k]; d != 0 {
				if s.Counters[mode][in.Name] == nil {
					s.Counters[mode][in.Name] = map[string]float64{}
				}
				s.Counters[mode][in.Name][k] = d
			}
		}
	}
	return nil
}
