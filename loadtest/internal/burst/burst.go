package burst

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/live"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

// stall is how long the SDK phase waits with no node registering before
// it gives up; listLimit how long, once every node has registered, for
// the instance to list them all.
const (
	stall     = 60 * time.Second
	listLimit = 60 * time.Second
)

// rejections is the instance's counter of refused handshakes, by reason;
// reason "busy" is a registration shed with 1013.
const rejections = "nodes_handshake_rejections_total"

// Run runs the burst profile with the switchyard binary bin: the SDK
// phase, then the naive one, each on an instance of its own.
func Run(ctx context.Context, cfg config.Config, bin, logDir string, progress io.Writer) (*report.BurstReport, error) {
	rep := &report.BurstReport{Nodes: cfg.Nodes}
	var err error
	fmt.Fprintf(progress, "== the Go SDK: %d nodes at once ==\n", cfg.Nodes)
	if rep.SDK, err = phase(ctx, cfg, bin, logDir, progress, "sdk", runSDK); err != nil {
		return rep, fmt.Errorf("the SDK burst: %w", err)
	}
	if ctx.Err() != nil {
		return rep, nil
	}
	fmt.Fprintf(progress, "== a naive client (no backoff): %d nodes at once for %v ==\n", cfg.Nodes, cfg.Duration)
	if rep.Naive, err = phase(ctx, cfg, bin, logDir, progress, "naive", runNaive); err != nil {
		return rep, fmt.Errorf("the naive burst: %w", err)
	}
	return rep, nil
}

// target is what a phase's client is given: the instance, the keys, the
// task type its nodes declare, and where it tallies registrations.
type target struct {
	cfg        config.Config
	in         *cluster.Instance
	keys       []string
	capability string
	prefix     string
	tally      *tally
	lines      *live.Printer
	client     string
}

// phase starts a fresh instance, runs one client's burst against it and
// reads what the instance refused meanwhile.
func phase(ctx context.Context, cfg config.Config, bin, logDir string, progress io.Writer, client string,
	run func(context.Context, *target, *report.BurstPhase) error) (report.BurstPhase, error) {
	p := report.BurstPhase{Client: client}
	c, err := cluster.Start(ctx, cfg, 1, bin, logDir)
	if err != nil {
		return p, err
	}
	defer c.Close()
	in := c.Instances()[0]
	p.Instance = in.Name
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	before, err := cluster.ScrapeCounters(ctx, hc, in.URL)
	if err != nil {
		return p, fmt.Errorf("read %s's /metrics: %w", in.Name, err)
	}
	id := cluster.RandHex(4)
	t := &target{cfg: cfg, in: in, keys: c.NodeKeys(), capability: "loadtest." + id + ".burst", prefix: "lt-" + id + "-",
		tally: newTally(cfg.Nodes), lines: live.NewPrinter(progress), client: client}
	runErr := run(ctx, t, &p)
	t.lines.End()
	if after, err := cluster.ScrapeCounters(context.WithoutCancel(ctx), hc, in.URL); err == nil {
		p.Rejections = map[string]float64{}
		for k, v := range after {
			if reason, ok := strings.CutPrefix(k, rejections); ok {
				reason = strings.TrimSuffix(strings.TrimPrefix(reason, `{reason="`), `"}`)
				if d := v - before[k]; d > 0 {
					p.Rejections[reason] = d
				}
			}
		}
		p.Sheds = p.Rejections["busy"]
	}
	p.Registered = t.tally.count()
	p.Quantiles = t.tally.quantiles(0.5, 0.9, 0.99)
	if p.Registered == cfg.Nodes {
		p.AllS = stats.Round3(t.tally.last().Seconds())
	}
	when := func(s float64) string {
		if s == 0 {
			return "not all"
		}
		return fmt.Sprintf("all by %.1f s", s)
	}
	fmt.Fprintf(progress, "[burst %s] %d of %d registered (%s), %d listed (%s), %.0f sheds (1013)\n",
		client, p.Registered, cfg.Nodes, when(p.AllS), p.Listed, when(p.ListedS), p.Sheds)
	return p, runErr
}

// runSDK lets cfg.Nodes SDK nodes go at once and waits until every one
// has registered (or none has for stall) and the instance lists them all.
func runSDK(ctx context.Context, t *target, p *report.BurstPhase) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	quiet := slog.New(slog.DiscardHandler)
	nodes := make([]*sdk.Node, t.cfg.Nodes)
	for i := range nodes {
		var err error
		nodes[i], err = sdk.NewNode(sdk.NodeConfig{
			URL: t.in.WSURL(), APIKey: t.keys[i%len(t.keys)], Name: t.prefix + strconv.Itoa(i),
			Capabilities: []string{t.capability}, Handler: handlers.Echo(), Logger: quiet,
			// The SDK's defaults otherwise (backoff 1–60 s), as a real
			// fleet runs.
			OnRegistered: func(string) { t.tally.mark(i) },
		})
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
	}
	t.tally.start()
	for _, n := range nodes {
		wg.Go(func() { _ = n.Run(ctx) })
	}
	last, lastChange := -1, time.Now()
	for t.tally.count() < t.cfg.Nodes {
		if !live.SleepUntil(ctx, time.Now().Add(time.Second)) {
			return ctx.Err()
		}
		n := t.tally.count()
		if n != last {
			last, lastChange = n, time.Now()
		}
		t.progress(n)
		if time.Since(lastChange) > stall {
			p.WindowS = stats.Round3(t.tally.since().Seconds())
			p.Stalled = fmt.Sprintf("only %d of %d registered after %.0f s, none in the last %v", n, t.cfg.Nodes, p.WindowS, stall)
			p.Listed = t.listed(ctx)
			return nil
		}
	}
	err := t.awaitListed(ctx, p)
	p.WindowS = stats.Round3(t.tally.since().Seconds())
	return err
}

// awaitListed waits until the instance lists every node, and records when.
func (t *target) awaitListed(ctx context.Context, p *report.BurstPhase) error {
	lctx, cancel := context.WithTimeout(ctx, listLimit)
	defer cancel()
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	err := t.in.AwaitListed(lctx, hc, t.capability, t.cfg.Nodes, 200*time.Millisecond)
	if err == nil {
		p.ListedS = stats.Round3(t.tally.since().Seconds())
	} else if ctx.Err() == nil {
		p.Stalled = err.Error()
		err = nil
	}
	p.Listed = t.listed(ctx)
	return err
}

// listed is how many of the phase's nodes the instance lists now (-1: it
// did not answer).
func (t *target) listed(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ns, err := sdk.NewClient(t.in.URL, "").Nodes(ctx, t.capability)
	if err != nil {
		return -1
	}
	return len(ns)
}

func (t *target) progress(n int) {
	el := t.tally.since()
	t.lines.Line(fmt.Sprintf("[burst %s] %6v  registered %d of %d (%.0f/s)", t.client, el.Round(time.Second), n, t.cfg.Nodes, float64(n)/el.Seconds()))
}

// tally is when each node first registered, from the moment they were
// all let go.
type tally struct {
	t0    time.Time
	first []atomic.Int64 // ns after t0; 0: not yet
	n     atomic.Int64
}

func newTally(n int) *tally { return &tally{first: make([]atomic.Int64, n)} }

func (t *tally) start()               { t.t0 = time.Now() }
func (t *tally) since() time.Duration { return time.Since(t.t0) }
func (t *tally) count() int           { return int(t.n.Load()) }

// mark records node i's registration; only its first counts.
func (t *tally) mark(i int) {
	if t.first[i].CompareAndSwap(0, max(int64(time.Since(t.t0)), 1)) {
		t.n.Add(1)
	}
}

func (t *tally) times() []time.Duration {
	var out []time.Duration
	for i := range t.first {
		if v := t.first[i].Load(); v != 0 {
			out = append(out, time.Duration(v))
		}
	}
	slices.Sort(out)
	return out
}

// last is when the last node so far first registered.
func (t *tally) last() time.Duration {
	ts := t.times()
	if len(ts) == 0 {
		return 0
	}
	return ts[len(ts)-1]
}

// quantiles are the first registrations' quantiles over every node (so
// that a client that registered few has none past its share).
func (t *tally) quantiles(qs ...float64) []report.Qs {
	ts := t.times()
	var out []report.Qs
	for _, q := range qs {
		k := int(q*float64(len(t.first))+0.999999) - 1
		if k < 0 || k >= len(ts) {
			continue
		}
		out = append(out, report.Qs{Q: q, S: stats.Round3(ts[k].Seconds())})
	}
	return out
}
