package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

// Nodes are a run's simulated nodes: SDK node agents whose handlers
// sleep (or stream) and tell the ledger which request they are running,
// where.
type Nodes struct {
	cfg    config.Config
	insts  []*cluster.Instance
	keys   []string
	ledger *ledger.Ledger
	plain  string // capability of plain tasks
	stream string // capability of streams
	idle   string // capability of the helper processes' idle nodes
	prefix string // node names

	local   int           // nodes this process holds (0..local-1); helpers hold the rest
	helpers []*helperProc // the fleet profile's nodes past local

	registered atomic.Int64 // registrations so far, reconnects included

	mu    sync.Mutex
	nodes []*simNode
	ids   map[string]int // node id → node index (learnt from OnRegistered)
	wg    sync.WaitGroup
}

// simNode is one simulated node and its current connection.
type simNode struct {
	idx    int
	home   int // instance it is connected to (or trying to)
	cancel context.CancelFunc
	done   chan struct{}
}

// New prepares cfg's nodes for the instances of c, their task types and
// names made unique by runID; Start connects them.
func New(cfg config.Config, c *cluster.Cluster, l *ledger.Ledger, runID string) *Nodes {
	return &Nodes{
		cfg: cfg, insts: c.Instances(), keys: c.NodeKeys(), ledger: l,
		plain: "loadtest." + runID + ".plain", stream: "loadtest." + runID + ".stream",
		idle: "loadtest." + runID + ".idle", prefix: "lt-" + runID + "-", ids: map[string]int{},
		local: cfg.LocalNodes(),
	}
}

// Start connects every node, node i to instance i mod N, paced at
// ConnectRate nodes a second (node i at i/ConnectRate): a fleet that
// registers all at once would make the handshake path what is measured.
//
// Nodes past f.local go to helper processes (helper.go), paced alike.
func (f *Nodes) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.local < f.cfg.Nodes {
		spec := helperSpec{Keys: f.keys, Prefix: f.prefix, Capability: f.idle, From: f.local, Rate: f.cfg.ConnectRate}
		for _, in := range f.insts {
			spec.URLs = append(spec.URLs, in.WSURL())
		}
		hs, err := startHelpers(spec, f.cfg.Nodes, f.local)
		if err != nil {
			return err
		}
		f.helpers = hs
	}
	for i := range f.local {
		n := &simNode{idx: i}
		f.nodes = append(f.nodes, n)
		delay := time.Duration(float64(i) / f.cfg.ConnectRate * float64(time.Second))
		if err := f.connectLocked(ctx, n, i%len(f.insts), delay); err != nil {
			return err
		}
	}
	return nil
}

// connectLocked runs node n against instance home after delay.
func (f *Nodes) connectLocked(ctx context.Context, n *simNode, home int, delay time.Duration) error {
	nctx, cancel := context.WithCancel(ctx)
	node, err := sdk.NewNode(sdk.NodeConfig{
		URL:            f.insts[home].WSURL(),
		APIKey:         f.keys[n.idx%len(f.keys)],
		Name:           f.prefix + strconv.Itoa(n.idx),
		Capabilities:   []string{f.plain, f.stream},
		MaxConcurrency: f.cfg.NodeConcurrency,
		Handler:        f.handler(n.idx, home),
		// The default 1 s is kept: a lost instance's nodes come back as a
		// real fleet's would.
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnRegistered: func(id string) {
			f.mu.Lock()
			f.ids[id] = n.idx
			f.mu.Unlock()
			f.registered.Add(1)
		},
	})
	if err != nil {
		cancel()
		return fmt.Errorf("node %d: %w", n.idx, err)
	}
	n.home, n.cancel, n.done = home, cancel, make(chan struct{})
	done := n.done
	f.wg.Go(func() {
		defer close(done)
		if delay > 0 {
			select {
			case <-nctx.Done():
				return
			case <-time.After(delay):
			}
		}
		if err := node.Run(nctx); err != nil {
			slog.Warn("simulated node stopped", "node", n.idx, "err", err)
		}
	})
	return nil
}

// handler is node idx's handler while it is connected to instance inst.
// It wraps handlers.Sleep, whose duration the SDK reports as
// processing_time_ms.
func (f *Nodes) handler(idx, inst int) sdk.Handler {
	plain := handlers.Sleep(f.cfg.HandlerMin, f.cfg.HandlerMax, 0)
	stream := handlers.Sleep(f.cfg.StreamLength*9/10, f.cfg.StreamLength*11/10, f.cfg.StreamChunks)
	return sdk.HandlerFunc(func(ctx context.Context, t *sdk.Task, emit func(string) error) (sdk.Result, error) {
		id, ok := ledger.ParseContent(t.Content)
		if ok && f.ledger.HandlerStart(id, idx, inst, time.Now()) {
			defer func() { f.ledger.HandlerEnd(id, time.Now()) }()
		}
		if t.Type == f.stream {
			return stream.Handle(ctx, t, emit)
		}
		return plain.Handle(ctx, t, emit)
	})
}

// AwaitRegistered waits until every node has registered once, calling
// progress (if not nil) with the count so far once a second. The nodes
// connect paced (start), and register as fast as the instances take them:
// it gives up only once the last node has been let go and no node has
// registered for stall.
func (f *Nodes) AwaitRegistered(ctx context.Context, stall time.Duration, progress func(registered int64)) error {
	start := time.Now()
	paced := start.Add(time.Duration(float64(f.cfg.Nodes) / f.cfg.ConnectRate * float64(time.Second)))
	last, lastChange := int64(-1), start
	nextReport := start.Add(time.Second)
	for {
		cur, now := f.registered.Load(), time.Now()
		for _, h := range f.helpers {
			cur += h.registered.Load()
		}
		if cur >= int64(f.cfg.Nodes) {
			return nil
		}
		if cur != last {
			last, lastChange = cur, now
		}
		if now.After(paced) && now.Sub(lastChange) > stall {
			return fmt.Errorf("only %d of %d nodes registered after %v, none in the last %v (the instances' logs may say why)",
				cur, f.cfg.Nodes, now.Sub(start).Round(time.Second), stall)
		}
		if progress != nil && !now.Before(nextReport) {
			progress(cur)
			nextReport = nextReport.Add(time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// AwaitDirectory waits until every instance lists every node (the cluster
// directory has propagated), so that the first requests see them all.
func (f *Nodes) AwaitDirectory(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	// A list of thousands of nodes is a large answer: ask less often.
	every := 50 * time.Millisecond
	if f.cfg.Nodes > 1000 {
		every = 500 * time.Millisecond
	}
	for _, in := range f.insts {
		if err := in.AwaitListed(ctx, hc, f.plain, f.local, every); err != nil {
			return fmt.Errorf("%w after %v", err, limit)
		}
		if f.local < f.cfg.Nodes {
			if err := in.AwaitListed(ctx, hc, f.idle, f.cfg.Nodes-f.local, every); err != nil {
				return fmt.Errorf("%w after %v (the helper processes' nodes)", err, limit)
			}
		}
	}
	return nil
}

// HomedOn returns the nodes currently connected to instance inst.
func (f *Nodes) HomedOn(inst int) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, n := range f.nodes {
		if n.home == inst {
			out = append(out, n.idx)
		}
	}
	return out
}

// CountOn returns how many nodes instance inst holds: this process's
// connected to it, and the helpers' (node i on instance i mod N).
func (f *Nodes) CountOn(inst int) int {
	n := len(f.HomedOn(inst))
	for _, h := range f.helpers {
		for i := h.spec.From; i < h.spec.To; i++ {
			if i%len(f.insts) == inst {
				n++
			}
		}
	}
	return n
}

// Rehome moves the nodes of a lost instance to the survivors, as a load
// balancer in front of the instances would on their next reconnect: each
// leaves its old address and reconnects after a jittered 0.5–1 s (the
// SDK's first backoff) to survivor i mod len(survivors).
func (f *Nodes) Rehome(ctx context.Context, from int, survivors []int) error {
	f.mu.Lock()
	var moving []*simNode
	for _, n := range f.nodes {
		if n.home == from {
			moving = append(moving, n)
			n.cancel()
		}
	}
	f.mu.Unlock()
	// Wait outside the lock: a node still registering calls OnRegistered,
	// which takes it.
	for _, n := range moving {
		<-n.done
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, n := range moving {
		delay := 500*time.Millisecond + rand.N(500*time.Millisecond)
		errs = append(errs, f.connectLocked(ctx, n, survivors[n.idx%len(survivors)], delay))
	}
	return errors.Join(errs...)
}

// NodeIndex returns the node with id, or -1.
func (f *Nodes) NodeIndex(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i, ok := f.ids[id]; ok {
		return i
	}
	return -1
}

// Stop disconnects every node and waits for them, and the helpers.
func (f *Nodes) Stop() {
	f.mu.Lock()
	for _, n := range f.nodes {
		n.cancel()
	}
	hs := f.helpers
	f.helpers = nil
	f.mu.Unlock()
	stopHelpers(hs)
	f.wg.Wait()
}

// Plain is the task type of the plain requests the nodes serve.
func (f *Nodes) Plain() string { return f.plain }

// Stream is the task type of the streams the nodes serve.
func (f *Nodes) Stream() string { return f.stream }
