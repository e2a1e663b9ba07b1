package nodes

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// cmdCounter counts the commands a client sends and the bytes of their
// arguments and replies (as go-redis renders them).
type cmdCounter struct {
	cmds, bytes atomic.Int64
	hgetall     atomic.Int64
}

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *cmdCounter) count(cmd redis.Cmder) {
	c.cmds.Add(1)
	c.bytes.Add(int64(len(cmd.String())))

	if cmd.Name() == "hgetall" {
		c.hgetall.Add(1)
	}
}

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.count(cmd)
		return err
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return err
	}
}

// testInstance is one instance's hub and directory on its own client.
type testInstance struct {
	id      string
	hub     *Hub
	dir     *ClusterDirectory
	rdb     *redis.Client
	counter *cmdCounter
	stop    func()
}

// newTestInstance builds a hub and directory for instance id in namespace
// ns. The backstop read is off: only the change feed (and Refresh) brings
// other instances' nodes.
func newTestInstance(t *testing.T, ns, id string, live []string, cfg ClusterConfig) *testInstance {
	t.Helper()
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	redistest.Client(t) // fails or skips the test when Redis is unreachable
	rdb := redis.NewClient(opt)
	counter := &cmdCounter{}
	rdb.AddHook(counter)
	t.Cleanup(func() { _ = rdb.Close() })
	changes := NewChanges()
	hub := NewHub(Config{Instance: id, Changes: changes}, nil, NewMemoryClaims(), nil)
	cfg.Namespace, cfg.Instance, cfg.Changes = ns, id, changes
	if cfg.BackstopInterval == 0 {
		cfg.BackstopInterval = -1
	}
	if cfg.ScanInterval == 0 {
		cfg.ScanInterval = time.Hour
	}
	liveFn := func(context.Context) ([]string, error) { return live, nil }
	dir := NewClusterDirectory(hub, rdb, liveFn, cfg) // as the server wires it
	return &testInstance{id: id, hub: hub, dir: dir, rdb: rdb, counter: counter}
}

// start subscribes and, if run, runs the directory until the test ends.
func (ti *testInstance) start(t *testing.T, run bool) {
	t.Helper()
	if err := ti.dir.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !run {
		t.Cleanup(func() { _ = ti.dir.ps.Load().Close() })
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ti.dir.Run(ctx) }()
	ti.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(ti.stop)
}

// attach connects a fake node (no socket) to the instance's hub, as Serve
// does before it announces the node.
func (ti *testInstance) attach(id string, caps ...string) *Session {
	s := &Session{NodeID: id, Gen: 1, ConnectedAt: time.Now(), hub: ti.hub,
		Info: Info{Name: id, AccountID: "acct", Trust: "community", Capabilities: caps, MaxConcurrency: 2},
		wake: make(chan struct{}, 1), writerDone: make(chan struct{})}
	ti.hub.attach(s)
	return s
}

func hasCandidate(d *ClusterDirectory, capability, nodeID string) bool {
	for _, c := range d.Candidates(nil, capability) {
		if c.NodeID == nodeID {
			return true
		}
	}
	return false
}

// waitFor awaits a condition that an event on the feed makes true.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling the condition, not standing in for it
	}
}

// An arrival on A reaches B through the change feed alone: B never reads
// A's hash after its start (no backstop, no scan), and the node is in B's
// candidates. Its departure reaches B the same way.
func TestDirectoryArrivalByEvent(t *testing.T) {
	ns := redistest.Namespace(t)
	live := []string{"A", "B"}
	a := newTestInstance(t, ns, "A", live, ClusterConfig{})
	b := newTestInstance(t, ns, "B", live, ClusterConfig{})
	a.start(t, true)
	b.start(t, true)
	readsBefore := b.counter.hgetall.Load()

	s := a.attach("n1", "chat")
	a.dir.Announce(context.Background(), s)
	waitFor(t, "B to see n1 arrive", func() bool { return hasCandidate(b.dir, "chat", "n1") })
	if got := b.counter.hgetall.Load() - readsBefore; got != 0 {
		t.Fatalf("B read %d hashes; the arrival should have come by event alone", got)
	}
	c := b.dir.Candidates(nil, "chat")
	if len(c) != 1 || c[0].Owner != "A" || c[0].Gen != 1 || c[0].FreeSlots != 2 {
		t.Fatalf("B's candidates %+v", c)
	}

	// Slots taken on A reach B, coalesced, by event.
	if !s.TryAcquire() {
		t.Fatal("acquire")
	}
	a.dir.Touch()
	waitFor(t, "B to see n1's slot taken", func() bool {
		c := b.dir.Candidates(nil, "chat")
		return len(c) == 1 && c[0].FreeSlots == 1
	})

	a.hub.detach(s)
	waitFor(t, "B to see n1 leave", func() bool { return !hasCandidate(b.dir, "chat", "n1") })
	if got := b.counter.hgetall.Load() - readsBefore; got != 0 {
		t.Fatalf("B read %d hashes; changes should have come by event alone", got)
	}
}

// Slots B assigns to A's node come back when B's tasks end, even when A
// never rewrites the node: a task that is over within A's flush gap leaves
// its free slots as written, so no event comes. Without the release, B
// would count the node full for good after max_concurrency such tasks.
func TestDirectoryAssignedSlotsComeBack(t *testing.T) {
	ns := redistest.Namespace(t)
	live := []string{"A", "B"}
	a := newTestInstance(t, ns, "A", live, ClusterConfig{})
	b := newTestInstance(t, ns, "B", live, ClusterConfig{})
	a.start(t, true)
	b.start(t, true)
	a.dir.Announce(context.Background(), a.attach("n1", "chat"))
	waitFor(t, "B to see n1 arrive", func() bool { return hasCandidate(b.dir, "chat", "n1") })
	free := func() int {
		c := b.dir.Candidates(nil, "chat")
		if len(c) != 1 {
			t.Fatalf("B's candidates %+v, want n1 alone", c)
		}
		return c[0].FreeSlots
	}
	if got := free(); got != 2 {
		t.Fatalf("n1 has %d free slots in B's view, want 2", got)
	}
	for i := range 5 {
		release, ok := b.dir.Reserve("n1")
		if !ok {
			t.Fatalf("task %d: B cannot reserve a slot of n1 with 2 free", i)
		}
		if got := free(); got != 1 {
			t.Fatalf("task %d: n1 has %d free slots while it runs, want 1", i, got)
		}
		release()
		if got := free(); got != 2 {
			t.Fatalf("task %d: n1 has %d free slots after it ended, want 2", i, got)
		}
	}
	// Two at once fill the node; a third is not sent (A would refuse it).
	r1, ok1 := b.dir.Reserve("n1")
	r2, ok2 := b.dir.Reserve("n1")
	if !ok1 || !ok2 {
		t.Fatalf("reserving n1's two slots: %v, %v; want both", ok1, ok2)
	}
	if got := free(); got != 0 {
		t.Fatalf("n1 has %d free slots with two tasks running, want 0", got)
	}
	if _, ok := b.dir.Reserve("n1"); ok {
		t.Fatal("B reserved a third slot of n1, which has two")
	}
	r1()
	r1() // a second release of the same attempt gives nothing back
	if got := free(); got != 1 {
		t.Fatalf("n1 has %d free slots after one of two ended (released twice), want 1", got)
	}
	r2()
	if got := free(); got != 2 {
		t.Fatalf("n1 has %d free slots after both ended, want 2", got)
	}
}

// A lost event shows as a gap in A's numbering; B then re-reads A's hash
// and finds what the lost event carried.
func TestDirectoryGapRereads(t *testing.T) {
	ns := redistest.Namespace(t)
	live := []string{"A", "B"}
	a := newTestInstance(t, ns, "A", live, ClusterConfig{})
	b := newTestInstance(t, ns, "B", live, ClusterConfig{})
	a.start(t, true)
	b.start(t, true)
	ctx := context.Background()

	// A write whose event was lost: the entry and the number are in A's
	// hash, but nobody was told. Then the next event (seq+2) arrives.
	key := a.dir.Key("A")
	seq, err := a.rdb.HGet(ctx, key, "_seq").Uint64()
	if err != nil {
		t.Fatal(err)
	}
	ghost := `{"node_id":"ghost","name":"ghost","capabilities":["chat"],"instance":"A","gen":3,"free_slots":1,"max_concurrency":1}`
	a.rdb.HSet(ctx, key, "ghost", ghost, "_seq", seq+2)
	readsBefore := b.counter.hgetall.Load()
	a.rdb.Publish(ctx, a.dir.EventsChannel(), strconv.FormatUint(seq+2, 10)+` {"i":"A","t":1}`)

	waitFor(t, "B to re-read A after the gap", func() bool { return hasCandidate(b.dir, "chat", "ghost") })
	if got := b.counter.hgetall.Load() - readsBefore; got != 1 {
		t.Fatalf("B read A's hash %d times after one gap, want 1", got)
	}
	// An old event (one the read included) changes nothing.
	a.rdb.Publish(ctx, a.dir.EventsChannel(), strconv.FormatUint(seq+1, 10)+` {"i":"A","t":1,"ops":[{"n":"ghost"}]}`)
	// And the feed goes on from the read's number.
	a.dir.wmu.Lock()
	a.dir.seq = seq + 2 // A's own writes continue after the hand-made one
	a.dir.wmu.Unlock()
	a.dir.Announce(ctx, a.attach("n2", "chat"))
	waitFor(t, "B to apply the next event", func() bool { return hasCandidate(b.dir, "chat", "n2") })
	if !hasCandidate(b.dir, "chat", "ghost") {
		t.Fatal("an old event was applied over a newer read")
	}
}

// A request that finds no candidate asks Redis once (Refresh) and finds a
// node whose event has not reached this instance. Concurrent callers share
// one read.
func TestDirectoryRefreshFindsUnannounced(t *testing.T) {
	ns := redistest.Namespace(t)
	live := []string{"A", "B"}
	a := newTestInstance(t, ns, "A", live, ClusterConfig{})
	b := newTestInstance(t, ns, "B", live, ClusterConfig{RefreshGap: time.Second})
	a.start(t, true)
	b.start(t, false) // subscribed, but its feed is never applied: events "in flight"

	s := a.attach("n1", "chat")
	a.dir.Announce(context.Background(), s)
	if hasCandidate(b.dir, "chat", "n1") {
		t.Fatal("B saw n1 without reading; the test proves nothing")
	}
	readsBefore := b.counter.hgetall.Load()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- b.dir.Refresh(context.Background()) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !hasCandidate(b.dir, "chat", "n1") {
		t.Fatal("Refresh did not find n1")
	}
	// 20 callers at once: one read, or two if some arrived while the
	// first was running (they wait for the next); never one each.
	if got := b.counter.hgetall.Load() - readsBefore; got < 1 || got > 2 {
		t.Fatalf("20 concurrent Refresh calls made %d reads", got)
	}
	// Rate limit: a second burst within RefreshGap waits for one more read.
	start := time.Now()
	if err := b.dir.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Fatalf("a Refresh within RefreshGap of the last ran at once (%v)", time.Since(start))
	}
}

// Idle costs nothing per node (invariant 12): with no changes, each of
// two instances' directory scans (every local node compared with what was
// written) and each heartbeat's KeepAlive sends the same Redis commands,
// of the same size, with 10 nodes as with 1,000. The scans and heartbeats
// are stepped by hand, as the write loop and the heartbeat run them, so
// the count is of work done, not of what fits in a window of wall time.
func TestDirectoryIdleCostIndependentOfFleet(t *testing.T) {
	ctx := context.Background()
	type cost struct{ scan, scanBytes, beat, beatBytes int64 }
	measure := func(n int) cost {
		ns := redistest.Namespace(t)
		live := []string{"A", "B"}
		cfg := ClusterConfig{PingInterval: time.Hour}
		a := newTestInstance(t, ns, "A", live, cfg)
		b := newTestInstance(t, ns, "B", live, cfg)
		for i := 0; i < n; i++ {
			a.attach(fmt.Sprintf("a%d", i), "chat")
			b.attach(fmt.Sprintf("b%d", i), "chat")
		}
		a.start(t, false)
		b.start(t, false)
		// A started before B wrote its hash: A reads it now. Then each
		// sees the other's nodes, and nothing changes from here on.
		if err := a.dir.readAll(ctx); err != nil {
			t.Fatal(err)
		}
		if a.dir.Online() != 2*n || b.dir.Online() != 2*n {
			t.Fatalf("A lists %d nodes, B %d; want %d each", a.dir.Online(), b.dir.Online(), 2*n)
		}
		both := func() (int64, int64) {
			return a.counter.cmds.Load() + b.counter.cmds.Load(), a.counter.bytes.Load() + b.counter.bytes.Load()
		}
		scan := func() {
			for _, ti := range []*testInstance{a, b} {
				ti.dir.changes.MarkAll() // what the write loop does every ScanInterval
				if err := ti.dir.flush(ctx, false); err != nil {
					t.Fatal(err)
				}
			}
		}
		beat := func() {
			for _, ti := range []*testInstance{a, b} {
				if err := ti.dir.KeepAlive(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The first run of a script on a server that has not seen it is
		// refused (NOSCRIPT) and sent again whole: one command more for
		// whichever fleet runs first. Run each once before counting.
		beat()
		scan()
		var c cost
		c0, b0 := both()
		for range 25 {
			scan()
		}
		c1, b1 := both()
		for range 5 {
			beat()
		}
		c2, b2 := both()
		c.scan, c.scanBytes, c.beat, c.beatBytes = c1-c0, b1-b0, c2-c1, b2-b1
		return c
	}
	small := measure(10)
	big := measure(1000)
	t.Logf("25 idle scans, 5 heartbeats of two instances: 10 nodes each → %+v; 1000 → %+v", small, big)
	if small.scan != 0 {
		t.Fatalf("25 idle scans sent %d commands; a scan that finds nothing changed sends none", small.scan)
	}
	if big.scan != small.scan || big.beat != small.beat {
		t.Fatalf("idle commands grew with the fleet: %d per 25 scans and %d per 5 heartbeats with 10 nodes, %d and %d with 1000",
			small.scan, small.beat, big.scan, big.beat)
	}
	if big.scanBytes != small.scanBytes || big.beatBytes > small.beatBytes+5*2*8 {
		// A heartbeat carries the time in ms: its length may differ by a digit.
		t.Fatalf("idle traffic grew with the fleet: %d bytes per 25 scans and %d per 5 heartbeats with 10 nodes, %d and %d with 1000",
			small.scanBytes, small.beatBytes, big.scanBytes, big.beatBytes)
	}
}

// Withdraw (drain) and Purge (sweeper) take an instance's nodes out of
// every reader's view at once, by event.
func TestDirectoryWithdrawAndPurge(t *testing.T) {
	ns := redistest.Namespace(t)
	live := []string{"A", "B", "C"}
	a := newTestInstance(t, ns, "A", live, ClusterConfig{})
	b := newTestInstance(t, ns, "B", live, ClusterConfig{})
	c := newTestInstance(t, ns, "C", live, ClusterConfig{})
	a.start(t, true)
	b.start(t, true)
	c.start(t, true)
	a.dir.Announce(context.Background(), a.attach("na", "chat"))
	c.dir.Announce(context.Background(), c.attach("nc", "chat"))
	waitFor(t, "B to see both", func() bool { return hasCandidate(b.dir, "chat", "na") && hasCandidate(b.dir, "chat", "nc") })

	if err := a.dir.Withdraw(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B to drop A's nodes", func() bool { return !hasCandidate(b.dir, "chat", "na") })
	c.stop() // C dies; B's sweeper purges it
	if err := b.dir.Purge(context.Background(), "C"); err != nil {
		t.Fatal(err)
	}
	if hasCandidate(b.dir, "chat", "nc") {
		t.Fatal("C's node still routable after the purge")
	}
	if a.rdb.Exists(context.Background(), a.dir.Key("C"), a.dir.Key("A")).Val() != 0 {
		t.Fatal("hashes left after withdraw and purge")
	}
}

// After Redis lost an instance's hash (a restart), its heartbeat's
// KeepAlive rewrites it whole and readers re-read it.
func TestDirectoryKeepAliveRewritesLostHash(t *testing.T) {
	ns := redistest.Namespace(t)
	live := []string{"A", "B"}
	a := newTestInstance(t, ns, "A", live, ClusterConfig{})
	b := newTestInstance(t, ns, "B", live, ClusterConfig{})
	a.start(t, true)
	b.start(t, true)
	a.dir.Announce(context.Background(), a.attach("n1", "chat"))
	waitFor(t, "B to see n1", func() bool { return hasCandidate(b.dir, "chat", "n1") })
	ctx := context.Background()
	a.rdb.Del(ctx, a.dir.Key("A"))
	if err := a.dir.KeepAlive(ctx); err != nil {
		t.Fatal(err)
	}
	if !a.rdb.HExists(ctx, a.dir.Key("A"), "n1").Val() {
		t.Fatal("KeepAlive did not rewrite the lost hash")
	}
	if ttl := a.rdb.PTTL(ctx, a.dir.Key("A")).Val(); ttl <= 0 {
		t.Fatalf("hash TTL %v", ttl)
	}
	// Writes go on after the rewrite, and B follows them.
	a.dir.Announce(ctx, a.attach("n2", "chat"))
	waitFor(t, "B to see n2", func() bool { return hasCandidate(b.dir, "chat", "n2") })
}

// A Redis restart loses every hash; each instance's feed comes back, it
// rewrites its own hash (checkOwn → KeepAlive → reset), and the others
// re-read it: routing across instances resumes by itself.
func TestDirectoryRecoversFromRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	live := []string{"A", "B"}
	mk := func(id string) *testInstance {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		changes := NewChanges()
		hub := NewHub(Config{Instance: id, Changes: changes}, nil, NewMemoryClaims(), nil)
		dir := NewClusterDirectory(hub, rdb, func(context.Context) ([]string, error) { return live, nil },
			ClusterConfig{Namespace: "sy", Instance: id, BackstopInterval: -1, ScanInterval: 50 * time.Millisecond, Changes: changes})
		return &testInstance{id: id, hub: hub, dir: dir, rdb: rdb}
	}
	a, b := mk("A"), mk("B")
	a.start(t, true)
	b.start(t, true)
	a.dir.Announce(context.Background(), a.attach("n1", "chat"))
	waitFor(t, "B to see n1", func() bool { return hasCandidate(b.dir, "chat", "n1") })
	srv.Restart()
	waitFor(t, "A's hash rewritten after the restart", func() bool {
		return a.rdb.HExists(context.Background(), a.dir.Key("A"), "n1").Val()
	})
	waitFor(t, "B healthy and routing to n1 again", func() bool { return b.dir.Healthy() && hasCandidate(b.dir, "chat", "n1") })
}
