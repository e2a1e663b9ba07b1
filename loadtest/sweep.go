package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

// The sweep's modes (issue 13).
const (
	ModeNATS  = "nats"  // the embedded NATS baseline (sweepnats.go)
	ModeLocal = "local" // one instance; the nodes and the requests on it
	ModeCross = "cross" // two instances; every node on the first, every request to the second
	ModeFloor = "floor" // a bare forwarder in place of switchyard (sweepfloor.go)
)

var sweepModes = []string{ModeNATS, ModeFloor, ModeLocal, ModeCross}

// parseModes reads --modes: a comma-separated list of sweep modes.
func parseModes(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(p))
	}
	return out, checkModes(out)
}

func checkModes(modes []string) error {
	if len(modes) == 0 {
		return errors.New("--modes must name at least one of nats, floor, local and cross")
	}
	for i, m := range modes {
		if !slices.Contains(sweepModes, m) {
			return fmt.Errorf("--modes: %q is not a mode: use nats, floor, local or cross", m)
		}
		if slices.Contains(modes[:i], m) {
			return fmt.Errorf("--modes names %s twice", m)
		}
	}
	return nil
}

// parseRates reads --rates: a comma-separated list of requests/s.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return nil, fmt.Errorf("--rates: %q is not a list of requests/s such as 1000,2500,5000", s)
		}
		out = append(out, v)
	}
	return out, checkRates(out)
}

func checkRates(rates []float64) error {
	if len(rates) == 0 {
		return errors.New("--rates must list at least one rate")
	}
	for i, r := range rates {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("--rates: %g is not a positive rate", r)
		}
		if i > 0 && r <= rates[i-1] {
			return fmt.Errorf("--rates must rise (%g after %g): the knee is the first rate whose p99 passes 10 ms", r, rates[i-1])
		}
	}
	return nil
}

// sweepErrors validates the sweep profile's configuration.
func (c Config) sweepErrors() error {
	errs := []error{checkModes(c.Modes), checkRates(c.Rates)}
	switch {
	case len(c.Targets) > 0:
		errs = append(errs, errors.New("--target: the sweep starts its own instances (cross puts every node on one and sends every request to the other); leave out --target"))
	case c.Fault != FaultNone:
		errs = append(errs, fmt.Errorf("--fault %s: the sweep injects no fault (use --fault none)", c.Fault))
	case c.RampTo > 0 || c.Streams > 0:
		errs = append(errs, errors.New("--ramp-to and --streams are not part of the sweep: its steps are open-loop plain requests only"))
	case c.Fleet || c.Idle != 0:
		errs = append(errs, errors.New("--idle is the fleet profile's idle window (--profile fleet)"))
	case c.Nodes < 1:
		errs = append(errs, errors.New("--nodes must be at least 1"))
	case c.NodeConcurrency < 1:
		errs = append(errs, errors.New("--node-concurrency must be at least 1"))
	case c.Duration <= 0:
		errs = append(errs, errors.New("--duration must be positive"))
	case c.TaskTimeout < time.Second:
		errs = append(errs, errors.New("--task-timeout must be at least 1s"))
	case c.ClientAccounts < 1 || c.NodeAccounts < 1:
		errs = append(errs, errors.New("--client-accounts and --node-accounts must be at least 1"))
	}
	return errors.Join(errs...)
}

// needsInstances reports whether the run starts switchyard instances.
func (c Config) needsInstances() bool {
	return !c.Sweep || slices.Contains(c.Modes, ModeLocal) || slices.Contains(c.Modes, ModeCross)
}

func (c Config) sweepSummary() string {
	rates := make([]string, len(c.Rates))
	for i, r := range c.Rates {
		rates[i] = strconv.FormatFloat(r, 'g', -1, 64)
	}
	return fmt.Sprintf("open-loop sweep of echo requests: modes %s; rates %s requests/s, each %v warm-up then %v counted; %d echo workers (switchyard nodes: max_concurrency %d); task timeout %v",
		strings.Join(c.Modes, ", "), strings.Join(rates, ", "), sweepWarmup, c.Duration, c.Nodes, c.NodeConcurrency, c.TaskTimeout)
}

// runSweep runs every mode of cfg in turn, every rate in each. A mode
// that could not be set up ends the sweep with an error and the rows so
// far.
func runSweep(ctx context.Context, cfg Config, bin, logDir string, progress io.Writer) (*SweepReport, error) {
	s := &SweepReport{Modes: cfg.Modes, Rates: cfg.Rates, WarmupS: sweepWarmup.Seconds(), CountedS: cfg.Duration.Seconds(),
		Nodes: cfg.Nodes, NodeConcurrency: cfg.NodeConcurrency, LateMs: ms(sweepLate), KneeMs: sweepKneeMs,
		Members: map[string][]*Instance{}, Counters: map[string]map[string]map[string]float64{}}
	defer s.finish()
	for _, mode := range cfg.Modes {
		fmt.Fprintf(progress, "== sweep: %s ==\n", mode)
		var err error
		switch mode {
		case ModeNATS:
			err = s.runNATS(ctx, cfg, progress)
		case ModeFloor:
			err = s.runFloor(ctx, cfg, progress)
		default:
			err = s.runSwitchyard(ctx, cfg, mode, bin, logDir, progress)
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
func (s *SweepReport) steps(ctx context.Context, cfg Config, mode string, target sweepTarget, dials *atomic.Int64, progress io.Writer) {
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

func (s *SweepReport) runNATS(ctx context.Context, cfg Config, progress io.Writer) error {
	b, err := startNATS(cfg.Nodes)
	if err != nil {
		return err
	}
	defer b.close()
	s.NATSClient = natsClientNote
	fmt.Fprintf(progress, "[sweep nats] embedded nats-server at %s, %d echo workers in one queue group\n", b.srv.ClientURL(), cfg.Nodes)
	s.steps(ctx, cfg, ModeNATS, b, new(atomic.Int64), progress)
	return nil
}

// runSwitchyard runs the local mode (one instance) or the cross mode (two
// sharing Redis and PostgreSQL: every node on the first, every request to
// the second).
func (s *SweepReport) runSwitchyard(ctx context.Context, cfg Config, mode, bin, logDir string, progress io.Writer) error {
	n := 1
	if mode == ModeCross {
		n = 2
	}
	c, err := startCluster(ctx, cfg, n, bin, logDir)
	if err != nil {
		return err
	}
	defer c.close()
	home, via := c.insts[0], c.insts[n-1]
	s.Members[mode] = c.insts

	capability := "loadtest." + randHex(4) + ".echo"
	start := time.Now()
	nodes, err := startEchoNodes(ctx, cfg, home.WSURL(), c.nodeKeys, capability)
	if err != nil {
		return err
	}
	defer nodes.stop()
	if err := nodes.awaitRegistered(ctx, 30*time.Second); err != nil {
		return err
	}
	hc, dials := sweepHTTPClient()
	defer hc.CloseIdleConnections()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = awaitListed(lctx, hc, via, capability, cfg.Nodes, 50*time.Millisecond)
	cancel()
	if err != nil {
		return fmt.Errorf("%w after 30s", err)
	}
	fmt.Fprintf(progress, "[sweep %s] %d echo nodes on %s registered and listed by %s in %.1f s; requests go to %s\n",
		mode, cfg.Nodes, home.Name, via.Name, time.Since(start).Seconds(), via.Name)

	before := map[string]map[string]float64{}
	for _, in := range c.insts {
		if m, err := scrapeCounters(ctx, hc, in.URL); err == nil {
			before[in.Name] = m
		}
	}
	target := &switchyardTarget{taskType: capability}
	for _, k := range c.clientKeys {
		target.clients = append(target.clients, sdk.NewClient(via.URL, k, sdk.WithHTTPClient(hc)))
	}
	s.steps(ctx, cfg, mode, target, dials, progress)

	s.Counters[mode] = map[string]map[string]float64{}
	for _, in := range c.insts {
		if in.Exited() {
			s.Exited = append(s.Exited, fmt.Sprintf("%s (%s mode) exited unexpectedly (%v); its log: %s", in.Name, mode, in.err, in.Log))
			continue
		}
		m, err := scrapeCounters(ctx, hc, in.URL)
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

// echoNodes are the switchyard modes' workers: SDK nodes whose handler
// (handlers.Echo) returns the task's content at once.
type echoNodes struct {
	want       int
	registered atomic.Int64
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// startEchoNodes connects cfg.Nodes echo nodes to the node socket at
// wsURL, all at once: twenty are no thundering herd.
func startEchoNodes(ctx context.Context, cfg Config, wsURL string, keys []string, capability string) (*echoNodes, error) {
	nctx, cancel := context.WithCancel(ctx)
	e := &echoNodes{want: cfg.Nodes, cancel: cancel}
	prefix := "sweep-" + randHex(3) + "-"
	for i := range cfg.Nodes {
		node, err := sdk.NewNode(sdk.NodeConfig{
			URL: wsURL, APIKey: keys[i%len(keys)], Name: prefix + strconv.Itoa(i),
			Capabilities: []string{capability}, MaxConcurrency: cfg.NodeConcurrency, Handler: handlers.Echo(),
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnRegistered: func(string) { e.registered.Add(1) },
		})
		if err != nil {
			e.stop()
			return nil, fmt.Errorf("echo node %d: %w", i, err)
		}
		e.wg.Go(func() { _ = node.Run(nctx) })
	}
	return e, nil
}

// awaitRegistered waits until every node has registered.
func (e *echoNodes) awaitRegistered(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for e.registered.Load() < int64(e.want) {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d echo nodes registered after %v (the instance's log may say why)", e.registered.Load(), e.want, limit)
		}
		if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return ctx.Err()
		}
	}
	return nil
}

// stop disconnects the nodes and waits for them.
func (e *echoNodes) stop() {
	e.cancel()
	e.wg.Wait()
}
