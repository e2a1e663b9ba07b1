package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/fleet"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
	"github.com/switchyard-dev/switchyard/sdk"
)

// runSweep runs every mode of cfg in turn, every rate in each. A mode
// that could not be set up ends the sweep with an error and the rows so
// far.
func runSweep(ctx context.Context, cfg config.Config, bin, logDir string, progress io.Writer) (*report.SweepReport, error) {
	s := &report.SweepReport{Modes: cfg.Modes, Rates: cfg.Rates, WarmupS: config.SweepWarmup.Seconds(), CountedS: cfg.Duration.Seconds(),
		Nodes: cfg.Nodes, NodeConcurrency: cfg.NodeConcurrency, LateMs: stats.Ms(config.SweepLate), KneeMs: config.SweepKneeMs,
		Members: map[string][]*cluster.Instance{}, Counters: map[string]map[string]map[string]float64{}}
	defer s.Finish()
	for _, mode := range cfg.Modes {
		fmt.Fprintf(progress, "== sweep: %s ==\n", mode)
		var err error
		switch mode {
		case config.ModeNATS:
			err = runNATS(ctx, s, cfg, progress)
		case config.ModeFloor:
			err = runFloor(ctx, s, cfg, progress)
		default:
			err = runSwitchyard(ctx, s, cfg, mode, bin, logDir, progress)
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

// steps runs every rate against target, stopping early if ctx ends.
func steps(ctx context.Context, s *report.SweepReport, cfg config.Config, mode string, target sweepTarget, dials *atomic.Int64, progress io.Writer) {
	for _, rate := range cfg.Rates {
		before := dials.Load()
		row := runSweepStep(ctx, cfg, mode, rate, target, progress)
		row.ConnsOpened = int(dials.Load() - before)
		s.Rows = append(s.Rows, row)
		if ctx.Err() != nil {
			return
		}
	}
}

func runNATS(ctx context.Context, s *report.SweepReport, cfg config.Config, progress io.Writer) error {
	b, err := startNATS(cfg.Nodes)
	if err != nil {
		return err
	}
	defer b.close()
	s.NATSClient = natsClientNote
	fmt.Fprintf(progress, "[sweep nats] embedded nats-server at %s, %d echo workers in one queue group\n", b.srv.ClientURL(), cfg.Nodes)
	steps(ctx, s, cfg, config.ModeNATS, b, new(atomic.Int64), progress)
	return nil
}

// runSwitchyard runs the local mode (one instance) or the cross mode (two
// sharing Redis and PostgreSQL: every node on the first, every request to
// the second).
func runSwitchyard(ctx context.Context, s *report.SweepReport, cfg config.Config, mode, bin, logDir string, progress io.Writer) error {
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
	fmt.Fprintf(progress, "[sweep %s] %d echo nodes on %s registered and listed by %s in %.1f s; requests go to %s\n",
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
	steps(ctx, s, cfg, mode, target, dials, progress)

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

// sweepHTTPClient is the switchyard modes' client: keep-alive with room
// for every connection a step may open to stay idle for the next request,
// so that the client never dials on the hot path once warm, and a count
// of the connections it dialled, for the report to show that.
func sweepHTTPClient() (*http.Client, *atomic.Int64) {
	dials := new(atomic.Int64)
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns: 0, MaxIdleConnsPerHost: 16384, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true,
	}}, dials
}

// switchyardTarget sends the sweep's requests to one instance, as plain
// requests (POST /api/v1/request, the sdk client's), round robin over the
// client accounts.
type switchyardTarget struct {
	clients  []*sdk.Client
	taskType string
	rr       atomic.Uint64
}

var _ sweepTarget = (*switchyardTarget)(nil)

func (t *switchyardTarget) do(ctx context.Context, body string) (string, error) {
	cl := t.clients[t.rr.Add(1)%uint64(len(t.clients))]
	res, err := cl.Request(ctx, sdk.Request{TaskType: t.taskType, Content: body})
	if err != nil {
		return "", err
	}
	if res.Status != "completed" {
		return "", &sweepError{Code: "task " + res.Status, Message: res.Result}
	}
	return res.Result, nil
}
