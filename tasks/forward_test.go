package tasks

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
)

// The forwarding table's transitions: whoever takes an entry has the last
// word (invariant 3), only the assigned connection answers
// (invariant 2), and no entry outlives its task.
func TestForwardTableTransitions(t *testing.T) {
	s1, s2 := &nodes.Session{}, &nodes.Session{}
	t0 := time.Unix(1000, 0)
	type step struct {
		op      string // add, sent, unsent, take, takeOther, takeAny, takeSession, expired, takeRequester
		want    bool   // add: added; take*: got it; sent/unsent: refuse; takeSession/expired/takeRequester: got it
		gone    bool   // sent/unsent: tell the requester node_gone
		wantLen int
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"sent then result", []step{{op: "add", want: true, wantLen: 1}, {op: "sent", wantLen: 1}, {op: "take", want: true, wantLen: 0}, {op: "take", want: false, wantLen: 0}}},
		{"duplicate task id refused", []step{{op: "add", want: true, wantLen: 1}, {op: "add", want: false, wantLen: 1}}},
		{"another connection cannot answer (inv 2)", []step{{op: "add", want: true, wantLen: 1}, {op: "sent", wantLen: 1}, {op: "takeOther", want: false, wantLen: 1}}},
		{"a cancel takes it from any connection", []step{{op: "add", want: true, wantLen: 1}, {op: "sent", wantLen: 1}, {op: "takeAny", want: true, wantLen: 0}}},
		{"send failed: refused, entry gone", []step{{op: "add", want: true, wantLen: 1}, {op: "unsent", want: true, wantLen: 0}}},
		{"session closed after send: the node had it", []step{{op: "add", want: true, wantLen: 1}, {op: "sent", wantLen: 1}, {op: "takeSession", want: true, wantLen: 0}}},
		{"session closed while sending, send ok: assigner says node_gone", []step{{op: "add", want: true, wantLen: 1}, {op: "takeSession", want: false, wantLen: 0}, {op: "sent", gone: true, wantLen: 0}}},
		{"session closed while sending, send failed: assigner refuses", []step{{op: "add", want: true, wantLen: 1}, {op: "takeSession", want: false, wantLen: 0}, {op: "unsent", want: true, wantLen: 0}}},
		{"node answered before Send returned: the taker has the last word", []step{{op: "add", want: true, wantLen: 1}, {op: "take", want: true, wantLen: 0}, {op: "sent", wantLen: 0}}},
		{"deadline sweep takes only sent entries", []step{{op: "add", want: true, wantLen: 1}, {op: "expired", want: false, wantLen: 1}, {op: "sent", wantLen: 1}, {op: "expired", want: true, wantLen: 0}}},
		{"requester gone takes only sent entries", []step{{op: "add", want: true, wantLen: 1}, {op: "takeRequester", want: false, wantLen: 1}, {op: "sent", wantLen: 1}, {op: "takeRequester", want: true, wantLen: 0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ft := newForwardTable(time.Minute)
			e := &fwdEntry{taskID: "t", nodeID: "n", replyTo: "R", sess: s1, gen: 1, deadline: t0}
			for i, st := range c.steps {
				var got, gone bool
				switch st.op {
				case "add":
					got = ft.add(&fwdEntry{taskID: e.taskID, nodeID: e.nodeID, replyTo: e.replyTo, sess: e.sess, gen: e.gen, deadline: e.deadline})
					if got {
						e = ft.tasks["t"]
					}
				case "sent":
					got, gone = ft.sent(e, true)
				case "unsent":
					got, gone = ft.sent(e, false)
				case "take":
					got = first(ft.take("t", s1)) != nil
				case "takeOther":
					got = first(ft.take("t", s2)) != nil
				case "takeAny":
					got = first(ft.take("t", nil)) != nil
				case "takeSession":
					live, _ := ft.takeSession(s1)
					got = len(live) == 1
				case "expired":
					live, _ := ft.expired(t0.Add(time.Second))
					got = len(live) == 1
				case "takeRequester":
					got = len(ft.takeRequester("R", t0)) == 1
				}
				if got != st.want || gone != st.gone || ft.len() != st.wantLen {
					t.Fatalf("step %d %s: got %v gone %v len %d; want %v gone %v len %d", i, st.op, got, gone, ft.len(), st.want, st.gone, st.wantLen)
				}
				if len(ft.bySession) > 0 && ft.len() == 0 {
					t.Fatalf("step %d %s: the session index outlives the entries", i, st.op)
				}
			}
		})
	}
}

func first(e *fwdEntry, _ bool) *fwdEntry { return e }

// A cancelled task of a node that did not declare task_cancel is held: its
// entry, and so the node's slot, stays until the node answers (the answer
// is the taker's, marked held: it goes nowhere), its connection ends, or
// the task's timeout passes (invariant 7), never past the deadline. It is
// not live: not counted as forwarding, not a requester's.
func TestForwardTableHeld(t *testing.T) {
	const hold = time.Minute
	t0 := time.Now() // chunk reads the clock itself
	plain, aware := &nodes.Session{}, &nodes.Session{Info: nodes.Info{TaskCancel: true}}
	setup := func(sess *nodes.Session, stream bool, deadline time.Time) (*forwardTable, *fwdEntry) {
		ft := newForwardTable(hold)
		e := &fwdEntry{taskID: "t", replyTo: "R", sess: sess, stream: stream, deadline: deadline}
		ft.add(e)
		ft.sent(e, true)
		return ft, e
	}
	check := func(t *testing.T, ft *forwardTable, live, held int) {
		t.Helper()
		if ft.len() != live || ft.holding() != held {
			t.Fatalf("live %d held %d, want %d and %d", ft.len(), ft.holding(), live, held)
		}
	}

	t.Run("held until the node answers", func(t *testing.T) {
		ft, _ := setup(plain, false, t0.Add(10*time.Minute))
		if e, held := ft.cancel("t", nil, t0, true); e == nil || !held {
			t.Fatalf("cancel: %v held %v, want the entry, held", e, held)
		}
		check(t, ft, 0, 1)
		if len(ft.requesters("self")) != 0 {
			t.Fatal("a held task's requester is watched")
		}
		if e, _ := ft.cancel("t", nil, t0, true); e != nil {
			t.Fatal("a second cancel took the held entry")
		}
		if e, _ := ft.take("t", &nodes.Session{}); e != nil {
			t.Fatal("another connection answered a held task")
		}
		if e, held := ft.take("t", plain); e == nil || !held {
			t.Fatalf("the node's answer: %v held %v, want the entry, held", e, held)
		}
		check(t, ft, 0, 0)
	})
	t.Run("a node that takes task_cancel is not held", func(t *testing.T) {
		ft, _ := setup(aware, false, t0.Add(10*time.Minute))
		if e, held := ft.cancel("t", nil, t0, true); e == nil || held {
			t.Fatalf("cancel: %v held %v, want the entry, not held", e, held)
		}
		check(t, ft, 0, 0)
	})
	t.Run("past the timeout nothing is held", func(t *testing.T) {
		ft, _ := setup(plain, false, t0.Add(10*time.Minute))
		if e, held := ft.cancel("t", nil, t0, false); e == nil || held {
			t.Fatalf("cancel: %v held %v, want the entry, not held", e, held)
		}
		check(t, ft, 0, 0)
		ft, _ = setup(plain, false, t0) // the deadline is now
		if e, held := ft.cancel("t", nil, t0, true); e == nil || held {
			t.Fatalf("cancel at the deadline: %v held %v, want the entry, not held", e, held)
		}
	})
	t.Run("the hold runs out at the timeout, capped by the deadline", func(t *testing.T) {
		ft, _ := setup(plain, false, t0.Add(10*time.Minute))
		ft.cancel("t", nil, t0, true)
		if live, unheld := ft.expired(t0.Add(hold - time.Millisecond)); len(live)+len(unheld) != 0 {
			t.Fatal("the hold ran out before the task timeout")
		}
		if live, unheld := ft.expired(t0.Add(hold + time.Millisecond)); len(live) != 0 || len(unheld) != 1 {
			t.Fatalf("after the timeout: %d live, %d unheld; want 0 and 1", len(live), len(unheld))
		}
		check(t, ft, 0, 0)
		ft, _ = setup(plain, false, t0.Add(time.Second))
		ft.cancel("t", nil, t0, true)
		if _, unheld := ft.expired(t0.Add(2 * time.Second)); len(unheld) != 1 {
			t.Fatal("the hold outlived the task's deadline")
		}
	})
	t.Run("a stream's chunks extend the hold", func(t *testing.T) {
		ft, _ := setup(plain, true, t0.Add(10*time.Minute))
		cancelled := t0.Add(-hold / 2) // held until t0 + hold/2
		ft.cancel("t", nil, cancelled, true)
		if _, res := ft.chunk("t", plain, 1, 1<<20); res != chunkHeld { // at t0 or a little later
			t.Fatalf("a held task's chunk: %v, want chunkHeld", res)
		}
		if _, unheld := ft.expired(t0.Add(hold * 3 / 4)); len(unheld) != 0 {
			t.Fatal("a streaming node's hold ran out a timeout after the cancel, not after its last chunk")
		}
		check(t, ft, 0, 1)
		if _, unheld := ft.expired(time.Now().Add(hold + time.Millisecond)); len(unheld) != 1 {
			t.Fatal("the hold did not run out a timeout after the last chunk")
		}
	})
	t.Run("the connection's end frees held slots", func(t *testing.T) {
		ft, _ := setup(plain, false, t0.Add(10*time.Minute))
		ft.add(&fwdEntry{taskID: "u", replyTo: "R", sess: plain, deadline: t0.Add(10 * time.Minute), state: stateSent})
		ft.cancel("t", nil, t0, true)
		live, held := ft.takeSession(plain)
		if len(live) != 1 || live[0].taskID != "u" || held != 1 {
			t.Fatalf("takeSession: %d live, %d held; want u, and 1", len(live), held)
		}
		check(t, ft, 0, 0)
	})
	t.Run("the result cap and a gone requester hold too", func(t *testing.T) {
		ft, _ := setup(plain, true, t0.Add(10*time.Minute))
		if e, res := ft.chunk("t", plain, 100, 10); res != chunkTooLarge || e.state != stateHeld {
			t.Fatalf("over the cap: %v state %v, want chunkTooLarge, held", res, e.state)
		}
		check(t, ft, 0, 1)
		ft, _ = setup(plain, false, t0.Add(10*time.Minute))
		if st := ft.takeRequester("R", t0); len(st) != 1 || !st[0].held {
			t.Fatalf("takeRequester: %+v, want one held", st)
		}
		check(t, ft, 0, 1)
	})
	t.Run("an entry still being sent is not held", func(t *testing.T) {
		ft := newForwardTable(hold)
		ft.add(&fwdEntry{taskID: "t", sess: plain, deadline: t0.Add(10 * time.Minute)})
		if e, held := ft.cancel("t", nil, t0, true); e == nil || held {
			t.Fatalf("cancel while sending: %v held %v, want the entry, not held", e, held)
		}
		check(t, ft, 0, 0)
	})
}

// Chunks: only the assigned connection's count, in sequence, against the
// result cap; going over fails the task and removes the entry.
// Empty deltas are not free (invariant 13): each costs ChunkOverhead, so a
// node streaming nothing but empty chunks hits the cap after
// limit/ChunkOverhead of them.
func TestForwardTableEmptyChunksCost(t *testing.T) {
	s := &nodes.Session{}
	ft := newForwardTable(time.Minute)
	e := &fwdEntry{taskID: "t", sess: s, stream: true}
	ft.add(e)
	ft.sent(e, true)
	const limit = 100 * ChunkOverhead
	for i := 1; ; i++ {
		got, res := ft.chunk("t", s, 0, limit)
		if res == chunkTooLarge {
			if i != 101 {
				t.Fatalf("the cap took %d empty chunks, want 101 (limit/ChunkOverhead + 1)", i)
			}
			return
		}
		if res != chunkForward || got.seq != uint32(i) || i > 1000 {
			t.Fatalf("empty chunk %d: %v seq %d", i, res, got.seq)
		}
	}
}

func TestForwardTableChunks(t *testing.T) {
	s1, s2 := &nodes.Session{Info: nodes.Info{TaskCancel: true}}, &nodes.Session{}
	ft := newForwardTable(time.Minute)
	e := &fwdEntry{taskID: "t", sess: s1, stream: true}
	ft.add(e)
	ft.sent(e, true)
	cases := []struct {
		sess    *nodes.Session
		n       int
		want    chunkResult
		wantSeq uint32
	}{
		{s2, 1, chunkDrop, 0},
		{s1, 4, chunkForward, 1},
		{s1, 4, chunkForward, 2},
		{s1, 3, chunkTooLarge, 2}, // 11 bytes + 3 overheads > 10 + 2 overheads
		{s1, 1, chunkDrop, 0},     // the entry is gone
	}
	for i, c := range cases {
		got, res := ft.chunk("t", c.sess, c.n, 10+2*ChunkOverhead)
		if res != c.want || got.seq != c.wantSeq {
			t.Fatalf("chunk %d: %v seq %d, want %v seq %d", i, res, got.seq, c.want, c.wantSeq)
		}
	}
	if ft.len() != 0 {
		t.Fatalf("entry outlives its task: %d", ft.len())
	}
}

// The tracker's transitions: a task hears only from its current attempt's
// owner, node and connection (invariant 2 on the requester side); a new
// attempt forgets what the old one queued; nothing is kept after remove.
func TestTrackerTransitions(t *testing.T) {
	type step struct {
		op     string // retarget, deliver, take, remove
		from   string
		node   string
		gen    uint64
		want   bool // deliver: accepted
		queued int  // take: envelopes taken
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"delivered from the current attempt", []step{{op: "retarget", from: "O", node: "n", gen: 1}, {op: "deliver", from: "O", node: "n", gen: 1, want: true}, {op: "take", queued: 1}, {op: "take", queued: 0}}},
		{"another owner, node or generation is dropped", []step{{op: "retarget", from: "O", node: "n", gen: 2}, {op: "deliver", from: "X", node: "n", gen: 2}, {op: "deliver", from: "O", node: "m", gen: 2}, {op: "deliver", from: "O", node: "n", gen: 1}, {op: "take", queued: 0}}},
		{"not yet assigned: nothing from an owner is accepted", []step{{op: "deliver", from: "O", node: "n", gen: 1}, {op: "take", queued: 0}}},
		{"a retry forgets the old attempt's queue", []step{{op: "retarget", from: "O", node: "n", gen: 1}, {op: "deliver", from: "O", node: "n", gen: 1, want: true}, {op: "retarget", from: "P", node: "m", gen: 1}, {op: "take", queued: 0}, {op: "deliver", from: "O", node: "n", gen: 1}}},
		{"removed: nothing more is accepted", []step{{op: "retarget", from: "O", node: "n", gen: 1}, {op: "remove"}, {op: "deliver", from: "O", node: "n", gen: 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker()
			p := tr.add(&Request{TaskID: "t"}, time.Now())
			var buf []queued
			for i, st := range c.steps {
				switch st.op {
				case "retarget":
					p.retarget(st.from, st.node, st.gen, i)
				case "deliver":
					if got := tr.deliver(newEnv(st.from, st.node, st.gen)); got != st.want {
						t.Fatalf("step %d: deliver from %s/%s/%d = %v, want %v", i, st.from, st.node, st.gen, got, st.want)
					}
				case "take":
					if buf = p.take(buf); len(buf) != st.queued {
						t.Fatalf("step %d: took %d, want %d", i, len(buf), st.queued)
					}
				case "remove":
					tr.remove(p)
					if tr.Len() != 0 {
						t.Fatalf("tracker keeps a removed task")
					}
				}
			}
		})
	}
}

// The instance's bound on unread stream chunks (StreamBufferBytes) holds
// over every task together: a task whose chunk would take the total over it
// fails with stream_overflow, alone; what it held is given back, so the
// others go on. Each chunk here costs 100 (36 bytes + ChunkOverhead).
func TestTrackerInstanceBound(t *testing.T) {
	var overflowed []string
	tr := newTrackerWith(trackerLimits{taskBytes: 1000, instanceBytes: 1500,
		overflow: func(p *pending, _, _ string, _ uint64) { overflowed = append(overflowed, p.id) }})
	p1 := tr.add(&Request{TaskID: "t1", Stream: true}, time.Now())
	p2 := tr.add(&Request{TaskID: "t2", Stream: true}, time.Now())
	for _, p := range []*pending{p1, p2} {
		p.retarget("O", "n", 1, 1)
	}
	delta := string(make([]byte, 100-ChunkOverhead))
	chunk := func(id string, seq uint32) bool {
		return tr.deliver(&bus.Envelope{Kind: bus.KindChunk, From: "O", TaskID: id, NodeID: "n", Gen: 1, Seq: seq, Delta: delta})
	}
	for i := range uint32(6) {
		chunk("t1", i+1) // t1 holds 600
	}
	for i := range uint32(9) {
		chunk("t2", i+1) // t2 holds 900: 1,500 together, the bound
	}
	if tr.Queued() != 1500 || len(overflowed) != 0 {
		t.Fatalf("queued %d, overflowed %v; want 1500 and none", tr.Queued(), overflowed)
	}
	chunk("t2", 10) // 1,600 > 1,500: t2 fails, within its own bound (1,000)
	if len(overflowed) != 1 || overflowed[0] != "t2" {
		t.Fatalf("overflowed %v, want [t2]", overflowed)
	}
	q := p2.take(nil)
	if len(q) != 1 || q[0].Kind != bus.KindResult || q[0].Result.Code != string(CodeStreamOverflow) ||
		!strings.Contains(q[0].Result.Message, "this instance holds") {
		t.Fatalf("t2 holds %+v, want only the instance-bound stream_overflow", q)
	}
	if tr.Queued() != 600 {
		t.Fatalf("queued %d after t2 failed, want t1's 600", tr.Queued())
	}
	if !chunk("t1", 7) || tr.Queued() != 700 || len(overflowed) != 1 {
		t.Fatalf("t1 after t2 failed: queued %d, overflowed %v", tr.Queued(), overflowed)
	}
	if chunk("t2", 11) {
		t.Fatal("a failed task took another chunk")
	}
}
