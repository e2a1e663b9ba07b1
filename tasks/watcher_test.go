package tasks

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
)

// stepped is a requester with one task waiting on owner "O", and a watcher
// stepped by hand over a fake bus.
func stepped(t *testing.T) (*watcher, *fakeBus, *fakeDir, *pending) {
	t.Helper()
	b, dir := newFakeBus(), &fakeDir{}
	m := NewMetrics(nil)
	cfg := Config{Instance: "R", Logger: quietLog()}.withDefaults()
	tr := newTracker()
	o := newOwner(cfg, b, tr.deliver, newOutbound(b, 1, m, cfg.Logger), noRecorder{}, m)
	o.sessions = noSessions{}
	w := newWatcher(cfg, b, noLiveness{}, dir, tr, o, m)
	p := tr.add(&Request{TaskID: "t"}, time.Now())
	p.retarget("O", "n", 1, 1)
	p.markAssigned(time.Now())
	b.set("R", 1)
	b.set("O", 1)
	return w, b, dir, p
}

// what the task has been told so far: "" (nothing), or the envelope kind
// and, for a result, its code.
func told(p *pending) string {
	q := p.take(nil)
	if len(q) == 0 {
		return ""
	}
	e := q[len(q)-1]
	if e.Kind == bus.KindResult {
		return "result " + e.Result.Code
	}
	return e.Kind.String()
}

func TestWatcherStepped(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	step := func(i int) time.Time { return t0.Add(time.Duration(i) * 250 * time.Millisecond) }

	t.Run("owner gone on two checks in a row fails its tasks (inv 4)", func(t *testing.T) {
		w, b, dir, p := stepped(t)
		w.check(ctx, step(1))
		b.set("O", 0)
		w.check(ctx, step(2))
		if got := told(p); got != "" {
			t.Fatalf("after one check without a subscriber: told %q, want nothing yet", got)
		}
		w.check(ctx, step(3))
		if got := told(p); got != "node_gone" {
			t.Fatalf("after two: told %q, want node_gone", got)
		}
		if g := dir.goneList(); len(g) != 1 || g[0] != "O" {
			t.Fatalf("directory told gone: %v", g)
		}
	})
	t.Run("an owner back on the next check is not gone", func(t *testing.T) {
		w, b, dir, p := stepped(t)
		b.set("O", 0)
		w.check(ctx, step(1))
		b.set("O", 1)
		w.check(ctx, step(2))
		b.set("O", 0)
		w.check(ctx, step(3))
		if got := told(p); got != "" || len(dir.goneList()) != 0 {
			t.Fatalf("told %q, gone %v; want nothing", got, dir.goneList())
		}
	})
	t.Run("own channel not counted: nobody is judged (Redis restarted)", func(t *testing.T) {
		w, b, _, p := stepped(t)
		b.set("R", 0)
		b.set("O", 0)
		w.check(ctx, step(1))
		w.check(ctx, step(2))
		b.set("R", 1)
		w.check(ctx, step(3)) // still in the grace that the first check started
		if got := told(p); got != "" {
			t.Fatalf("told %q during the grace", got)
		}
	})
	t.Run("Redis unreachable for a second fails remote tasks with 503 (inv 10)", func(t *testing.T) {
		w, b, _, p := stepped(t)
		b.fail(errors.New("connection refused"))
		w.check(ctx, step(1))
		w.check(ctx, step(4)) // 750ms later
		if got := told(p); got != "" {
			t.Fatalf("told %q before a second", got)
		}
		w.check(ctx, step(5))
		if got := told(p); got != "result "+string(CodeUnavailable) {
			t.Fatalf("told %q, want unavailable", got)
		}
	})
	// A Redis Cluster master dies just after this instance resubscribed
	// (the grace after a resubscription has begun): its channel's slot has
	// no master until a replica takes over, so no answer can reach it. The
	// grace keeps others from being judged dead, not this from failing
	// what cannot be answered.
	t.Run("Redis unreachable during a grace still fails remote tasks", func(t *testing.T) {
		w, b, dir, p := stepped(t)
		w.graceTo.Store(step(20).UnixNano())
		b.fail(errors.New("dial tcp: connection refused"))
		w.check(ctx, step(1))
		w.check(ctx, step(5))
		if got := told(p); got != "result "+string(CodeUnavailable) {
			t.Fatalf("told %q, want unavailable", got)
		}
		if len(dir.goneList()) != 0 {
			t.Fatalf("instances judged gone during the grace: %v", dir.goneList())
		}
	})
}

// Redis restarts too fast for the watcher to see it
// unreachable for a second; the owner's answer, published meanwhile, is
// lost. When the subscription is back, the tasks waiting on another
// instance fail at once with 503, not at their task timeout; a task handed
// over after the subscription returned is left alone.
func TestResubscribedFailsRemoteTasksAtOnce(t *testing.T) {
	b := newFakeBus()
	e := New(Config{Instance: "R", Logger: quietLog(), NoWatcher: true},
		Deps{Bus: b, Nodes: func(nodes.Events) NodeSide { return NodeSide{Sessions: noSessions{}, Directory: &fakeDir{}} }})
	defer runEngine(t, e)()
	before := e.tracker.add(&Request{TaskID: "before"}, time.Now())
	before.retarget("O", "n", 1, 1)
	before.markAssigned(time.Now().Add(-time.Millisecond))
	local := e.tracker.add(&Request{TaskID: "local"}, time.Now())
	local.retarget("R", "m", 1, 1) // on this instance's own node: not affected
	local.markAssigned(time.Now().Add(-time.Millisecond))

	e.Resubscribed(3 * time.Second)
	if got := told(before); got != "result "+string(CodeUnavailable) {
		t.Fatalf("remote task told %q, want unavailable at once", got)
	}
	if got := told(local); got != "" {
		t.Fatalf("local task told %q", got)
	}
	after := e.tracker.add(&Request{TaskID: "after"}, time.Now())
	after.retarget("O", "n", 1, 1)
	after.markAssigned(time.Now().Add(time.Hour))
	e.watcher.failRemote(e.tracker.owners("R"), time.Now(), "x")
	if got := told(after); got != "" {
		t.Fatalf("a task handed over after the cutoff told %q", got)
	}
}

// The bus handler never blocks: a refused assign's answer is published by
// the outbound queue, not on the receive loop, and an overflow is dropped
// and counted rather than waited for.
func TestHandleEnvelopeNeverBlocks(t *testing.T) {
	b := newFakeBus()
	b.gate = make(chan struct{}) // every publish hangs until the gate opens
	b.set("Q", 1)
	e := New(Config{Instance: "O", Logger: quietLog(), OutboundQueue: 2},
		Deps{Bus: b, Nodes: func(nodes.Events) NodeSide { return NodeSide{Sessions: noSessions{}, Directory: &fakeDir{}} }})
	defer runEngine(t, e)()
	assign := &bus.Envelope{Kind: bus.KindAssign, From: "Q", ReplyTo: "Q", TaskID: "t", NodeID: "absent", Gen: 1}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// One publish per worker, each awaited so the queue is empty again;
		// then OutboundQueue more wait in the queue, and the rest are dropped.
		for range outboundWorkers {
			e.HandleEnvelope(assign)
			<-b.entered
		}
		for range 2 + 3 {
			e.HandleEnvelope(assign)
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("HandleEnvelope blocked on a publish")
	}
	if n := testCounter(e.metrics.outDropped.WithLabelValues("queue_full")); n != 3 {
		t.Fatalf("dropped %v replies, want 3", n)
	}
	close(b.gate)
	waitFor(t, func() bool { return len(b.sent()) == outboundWorkers+2 })
	for _, env := range b.sent() {
		if env.Kind != bus.KindResult || env.Result.Code != string(refusedNotHere) || env.TaskID != "t" || env.From != "O" {
			t.Fatalf("reply %+v %+v", env, env.Result)
		}
	}
}
