package tasks_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// instance is the task side of one switchyard instance, without HTTP: the
// requester (tracker, dispatcher), the owner (owner, hub) and a watcher,
// subscribed to a shared bus. Two of them on one bus.Memory are two
// instances in one process.
type instance struct {
	id    string
	eng   *tasks.Engine
	hub   *nodes.Hub
	sub   bus.Subscription
	wsURL string
	rec   *records
}

type records struct {
	mu    sync.Mutex
	tasks []store.TaskRecord
	usage []store.UsageReport
	gone  []string // the tasks whose reports came unseen
	outs  []store.Outcome
}

func (r *records) RecordTask(rec store.TaskRecord) {
	r.mu.Lock()
	r.tasks = append(r.tasks, rec)
	r.mu.Unlock()
}
func (r *records) RecordOutcome(o store.Outcome) {
	r.mu.Lock()
	r.outs = append(r.outs, o)
	r.mu.Unlock()
}
func (r *records) RecordUsage(rep store.UsageReport, unseen bool) {
	r.mu.Lock()
	r.usage = append(r.usage, rep)
	if unseen {
		r.gone = append(r.gone, rep.TaskID)
	}
	r.mu.Unlock()
}

// reports returns the usage reports recorded so far.
func (r *records) reports() []store.UsageReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.usage)
}

type keyAuth struct{}

func (keyAuth) AuthenticateNode(_ context.Context, key string) (nodes.Account, error) {
	if key != "good" {
		return nodes.Account{}, nodes.ErrUnknownKey
	}
	return nodes.Account{ID: "acct", Trust: "community"}, nil
}

// newInstance starts an instance on b, built the way server.App builds
// one. dir is where its dispatcher looks for nodes; nil means its own hub.
// alive, if given, is its Liveness (the registry's alive keys). It returns
// once the engine runs (Ready).
func newInstance(t *testing.T, id string, b bus.Bus, dir tasks.Directory, cfg tasks.Config, alive ...tasks.Liveness) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	in := &instance{id: id, rec: &records{}}
	cfg.Instance, cfg.Logger = id, log
	if cfg.WatchInterval == 0 {
		cfg.WatchInterval = 20 * time.Millisecond
	}
	deps := tasks.Deps{Bus: b, Recorder: in.rec,
		Nodes: func(ev nodes.Events) tasks.NodeSide {
			in.hub = nodes.NewHub(nodes.Config{Instance: id, Logger: log}, keyAuth{}, nodes.NewMemoryClaims(), ev)
			if dir == nil {
				dir = in.hub
			}
			return tasks.NodeSide{Sessions: in.hub, Directory: dir}
		}}
	if len(alive) > 0 {
		deps.Liveness = alive[0]
	}
	in.eng = tasks.New(cfg, deps)
	stopEngine := runEngine(t, in.eng)
	<-in.eng.Ready() // as the App: nodes are served once the engine runs
	sub, err := b.Subscribe(ctx, id, in.eng.HandleEnvelope)
	if err != nil {
		t.Fatal(err)
	}
	in.sub = sub
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		_ = in.hub.Serve(ctx, c, r.RemoteAddr, nil)
	}))
	in.wsURL = "ws" + strings.TrimPrefix(srv.URL, "http")
	t.Cleanup(func() {
		sctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		_ = in.hub.Shutdown(sctx)
		cancel()
		srv.Close()
		_ = in.sub.Close()
		stopEngine()
	})
	return in
}

// runEngine runs e until the returned stop is called or the test ends;
// stop returns once e's Run has (and fails the test if Run failed).
func runEngine(t *testing.T, e *tasks.Engine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("engine Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// pair is a requester R whose dispatcher routes to the nodes of owner O.
func pair(t *testing.T, cfg tasks.Config) (r, o *instance, b *bus.Memory) {
	b = bus.NewMemory()
	t.Cleanup(func() { _ = b.Close() })
	o = newInstance(t, "O", b, nil, cfg)
	r = newInstance(t, "R", b, o.hub, cfg) // O's hub lists its nodes with owner "O"
	return r, o, b
}

type outcome struct {
	out tasks.Outcome
	err error
}

// run starts a task the way an HTTP request would; it is abandoned (its
// context cancelled) and waited for when the test ends.
func run(t *testing.T, r *instance, ctx context.Context, req tasks.Request, h tasks.Hooks) <-chan outcome {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan outcome, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, err := r.eng.RunTask(ctx, req, h)
		ch <- outcome{out, err}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ch
}

func wait(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("no outcome within 5s")
	}
	return outcome{}
}

func code(err error) tasks.Code {
	var e *tasks.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Requester and owner are separate components that talk through the bus:
// a plain and a streaming task cross from R to O's node and back.
func TestCrossInstancePlainAndStream(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{})
	n := nodetest.Connect(t, o.wsURL, nodetest.Reg("good", "w", "echo"))

	ch := run(t, r, context.Background(), tasks.Request{TaskID: "t1", TaskType: "echo", Content: "hi", Params: []byte(`{"k":1}`)}, tasks.Hooks{})
	m := n.Expect("task_assign")
	if m.TaskID() != "t1" || m.Payload["content"] != "hi" || m.Payload["params"].(map[string]any)["k"] != 1.0 {
		t.Fatalf("assign %v", m.Payload)
	}
	n.Result("t1", "completed", "HI")
	if got := wait(t, ch); got.err != nil || got.out.Result != "HI" || got.out.NodeID != n.ID {
		t.Fatalf("%+v", got)
	}

	var deltas []string
	ch = run(t, r, context.Background(), tasks.Request{TaskID: "t2", TaskType: "echo", Content: "x", Stream: true},
		tasks.Hooks{Chunk: func(d string) error { deltas = append(deltas, d); return nil }})
	n.Expect("task_assign")
	for _, d := range []string{"a", "b", "c"} {
		n.Chunk("t2", d)
	}
	n.Result("t2", "completed", "abc")
	if got := wait(t, ch); got.err != nil || strings.Join(deltas, "") != "abc" || !got.out.Streamed {
		t.Fatalf("%+v deltas %v", got, deltas)
	}
	if r.eng.Requesting() != 0 || o.eng.Forwarding() != 0 {
		t.Fatalf("entries outlive their tasks: tracker %d, forwarding %d", r.eng.Requesting(), o.eng.Forwarding())
	}
	if len(r.rec.tasks) != 2 || r.rec.tasks[0].Owner != "O" || r.rec.tasks[0].Requester != "R" {
		t.Fatalf("records %+v", r.rec.tasks)
	}
}

// Invariant 5: when the requester is gone, the owner cancels the task on
// the node at once. A stream notices on its next chunk (the publish reaches
// nobody); a plain task through the watcher.
func TestInvariant5RequesterGoneFreesTheNode(t *testing.T) {
	t.Run("stream", func(t *testing.T) {
		r, o, _ := pair(t, tasks.Config{})
		n := nodetest.Connect(t, o.wsURL, nodetest.WithCancel(nodetest.Reg("good", "w", "echo")))
		got := make(chan string, 16)
		run(t, r, context.Background(), tasks.Request{TaskID: "s1", TaskType: "echo", Stream: true},
			tasks.Hooks{Chunk: func(d string) error { got <- d; return nil }})
		n.Expect("task_assign")
		n.Chunk("s1", "first")
		<-got
		_ = r.sub.Close() // the requester instance dies
		n.Chunk("s1", "second")
		if m := n.Expect("task_cancel"); m.TaskID() != "s1" || m.Payload["reason"] != "requester gone" {
			t.Fatalf("cancel %v", m.Payload)
		}
		waitUntil(t, func() bool { return o.eng.Forwarding() == 0 })
	})
	t.Run("plain", func(t *testing.T) {
		r, o, _ := pair(t, tasks.Config{})
		n := nodetest.Connect(t, o.wsURL, nodetest.WithCancel(nodetest.Reg("good", "w", "echo")))
		run(t, r, context.Background(), tasks.Request{TaskID: "p1", TaskType: "echo"}, tasks.Hooks{})
		n.Expect("task_assign")
		start := time.Now()
		_ = r.sub.Close()
		if m := n.Expect("task_cancel"); m.TaskID() != "p1" || m.Payload["reason"] != "requester gone" {
			t.Fatalf("cancel %v", m.Payload)
		}
		t.Logf("owner noticed the requester was gone after %s", time.Since(start))
		waitUntil(t, func() bool { return o.eng.Forwarding() == 0 })
	})
}

// aliveKeys is a Liveness whose instances lose their alive key on demand.
type aliveKeys struct {
	mu   sync.Mutex
	dead map[string]bool
}

func (a *aliveKeys) kill(id string) { a.mu.Lock(); a.dead[id] = true; a.mu.Unlock() }

func (a *aliveKeys) Alive(_ context.Context, ids []string) (map[string]bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = !a.dead[id]
	}
	return out, nil
}

// A requester taken for gone while it is alive (Redis lost its alive key,
// its subscription stayed): the owner cancels its task on the node, and
// the requester hears so at once with 503, not at the task timeout.
func TestRequesterTakenForGoneHearsAtOnce(t *testing.T) {
	b := bus.NewMemory()
	t.Cleanup(func() { _ = b.Close() })
	alive := &aliveKeys{dead: map[string]bool{}}
	cfg := tasks.Config{TaskTimeout: time.Minute}
	o := newInstance(t, "O", b, nil, cfg, alive)
	r := newInstance(t, "R", b, o.hub, cfg)
	n := nodetest.Connect(t, o.wsURL, nodetest.WithCancel(nodetest.Reg("good", "w", "echo")))
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "p1", TaskType: "echo"}, tasks.Hooks{})
	n.Expect("task_assign")
	alive.kill("R")
	if m := n.Expect("task_cancel"); m.TaskID() != "p1" || m.Payload["reason"] != "requester gone" {
		t.Fatalf("cancel %v", m.Payload)
	}
	if got := wait(t, ch); code(got.err) != tasks.CodeUnavailable {
		t.Fatalf("the requester got %+v, %v; want unavailable", got.out, got.err)
	}
}

// Invariant 4: when the owner is gone, the requester fails its tasks with
// node_disconnected at once, not at their deadline.
func TestInvariant4OwnerGoneFailsTasksFast(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{TaskTimeout: time.Minute})
	n := nodetest.Connect(t, o.wsURL, nodetest.Reg("good", "w", "echo"))
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "t", TaskType: "echo"}, tasks.Hooks{})
	n.Expect("task_assign")
	start := time.Now()
	_ = o.sub.Close() // the owner instance dies
	got := wait(t, ch)
	if code(got.err) != tasks.CodeNodeDisconnected || time.Since(start) > time.Second {
		t.Fatalf("%v after %s", got.err, time.Since(start))
	}
}

// Invariant 6 across instances: a client that goes away cancels the task
// on the node, through the bus.
func TestInvariant6CancelCrossesTheBus(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{})
	n := nodetest.Connect(t, o.wsURL, nodetest.WithCancel(map[string]any{"api_key": "good", "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 1}))
	ctx, cancel := context.WithCancel(context.Background())
	ch := run(t, r, ctx, tasks.Request{TaskID: "c1", TaskType: "echo"}, tasks.Hooks{})
	n.Expect("task_assign")
	cancel()
	if got := wait(t, ch); code(got.err) != tasks.CodeCanceled {
		t.Fatalf("%v", got.err)
	}
	if m := n.Expect("task_cancel"); m.TaskID() != "c1" || m.Payload["reason"] != "client gone" {
		t.Fatalf("cancel %v", m.Payload)
	}
	// The slot is free again on the owner.
	ch = run(t, r, context.Background(), tasks.Request{TaskID: "c2", TaskType: "echo"}, tasks.Hooks{})
	n.Result(n.Expect("task_assign").TaskID(), "completed", "ok")
	if got := wait(t, ch); got.err != nil {
		t.Fatal(got.err)
	}
}

// Across instances too, a node that did not declare task_cancel is sent
// none when the client on the requesting instance goes away: its owner
// holds the node's slot until the node answers, and discards the answer
// without counting it as a stray (invariant 7: the waiting task gets the
// slot only then).
func TestCancelHeldAcrossTheBus(t *testing.T) {
	b := bus.NewMemory()
	t.Cleanup(func() { _ = b.Close() })
	reg := prometheus.NewRegistry()
	o := newInstance(t, "O", b, nil, tasks.Config{Registerer: reg})
	r := newInstance(t, "R", b, o.hub, tasks.Config{})
	n := nodetest.Connect(t, o.wsURL, map[string]any{"api_key": "good", "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 1})
	ctx, cancel := context.WithCancel(context.Background())
	ch := run(t, r, ctx, tasks.Request{TaskID: "h1", TaskType: "echo"}, tasks.Hooks{})
	n.Expect("task_assign")
	cancel()
	if got := wait(t, ch); code(got.err) != tasks.CodeCanceled {
		t.Fatalf("%v", got.err)
	}
	waitUntil(t, func() bool { return o.eng.Holding() == 1 }) // the cancel crossed the bus
	if s := o.hub.Session(n.ID); s == nil || s.FreeSlots() != 0 {
		t.Fatal("the node's one slot is free while it still runs the cancelled task")
	}
	ch = run(t, r, context.Background(), tasks.Request{TaskID: "h2", TaskType: "echo"}, tasks.Hooks{})
	waitUntil(t, func() bool { return r.eng.Requesting() == 1 })
	n.Result("h1", "completed", "too late")
	if m := n.Recv(5 * time.Second); m.MsgType != "task_assign" || m.TaskID() != "h2" {
		t.Fatalf("after its late answer the node got %s %v, want task_assign h2", m.MsgType, m.Payload)
	}
	n.Result("h2", "completed", "ok")
	if got := wait(t, ch); got.err != nil || got.out.Result != "ok" {
		t.Fatalf("%+v", got)
	}
	if d, h := gathered(t, reg, "switchyard_tasks_dropped_events_total"), gathered(t, reg, "switchyard_tasks_cancel_holds_ended_total"); d != 0 || h != 1 || o.eng.Holding() != 0 {
		t.Fatalf("dropped %v, holds ended %v, holding %d; want 0, 1, 0", d, h, o.eng.Holding())
	}
	// The node did the cancelled task's work: its answer is reported too.
	// The owner records a report after passing the answer on (whether it
	// reached a requester is part of the report), so h2's may follow h2's
	// answer here by a moment.
	waitUntil(t, func() bool { return len(o.rec.reports()) >= 2 })
	if got := o.rec.reports(); len(got) != 2 || got[0].TaskID != "h1" || got[0].ResultBytes != int64(len("too late")) || got[1].TaskID != "h2" {
		t.Fatalf("the owner's usage reports %+v, want h1's late answer and h2's", got)
	}
}

// What a node reports for a task is recorded where the node is connected
// (the owner), with the requesting account, key and task type, once per
// task and node: also when nobody waits for the answer any more (the
// requester is gone), and never by the requester.
func TestUsageReportedByTheOwner(t *testing.T) {
	b := bus.NewMemory()
	t.Cleanup(func() { _ = b.Close() })
	cfg := tasks.Config{TaskTimeout: time.Minute}
	o := newInstance(t, "O", b, nil, cfg)
	r := newInstance(t, "R", b, o.hub, cfg)
	n := nodetest.Connect(t, o.wsURL, nodetest.Reg("good", "w", "echo"))
	answer := func(id string, ms any, usage any) {
		n.MustSend("task_result", map[string]any{"task_id": id, "node_id": n.ID, "status": "completed",
			"result": "answer", "processing_time_ms": ms, "usage": usage})
	}

	ch := run(t, r, context.Background(), tasks.Request{TaskID: "u1", AccountID: "acct", KeyID: "key-1", TaskType: "echo", Content: "abc"}, tasks.Hooks{})
	n.Expect("task_assign")
	answer("u1", 42, map[string]any{"prompt_tokens": 3, "completion_tokens": 5})
	if got := wait(t, ch); got.err != nil || got.out.Usage == nil || got.out.Usage.PromptTokens != 3 {
		t.Fatalf("%+v", got)
	}
	answer("u1", 42, map[string]any{"prompt_tokens": 3, "completion_tokens": 5}) // again: a stray, not counted twice

	// The requester dies with u2 on the node; the node answers anyway.
	run(t, r, context.Background(), tasks.Request{TaskID: "u2", AccountID: "acct", KeyID: "key-2", TaskType: "echo", Content: "seven b"}, tasks.Hooks{})
	n.Expect("task_assign")
	_ = r.sub.Close()
	answer("u2", nil, map[string]any{"prompt_tokens": 7, "completion_tokens": 6}) // no processing time: the owner's measure

	waitUntil(t, func() bool { return len(o.rec.reports()) == 2 })
	got := o.rec.reports()
	want := []store.UsageReport{
		{TaskID: "u1", NodeID: n.ID, AccountID: "acct", KeyID: "key-1", TaskType: "echo", PromptTokens: 3, CompletionTokens: 5, NodeMs: 42, ResultBytes: 6},
		{TaskID: "u2", NodeID: n.ID, AccountID: "acct", KeyID: "key-2", TaskType: "echo", PromptTokens: 7, CompletionTokens: 6, ResultBytes: 6},
	}
	for i := range got {
		if got[i].At.IsZero() || got[i].NodeMs < 0 {
			t.Errorf("report %d has no time or a negative node time: %+v", i, got[i])
		}
		got[i].At = time.Time{}
		if i == 1 {
			got[i].NodeMs = 0
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the owner's usage reports\n got  %+v\n want %+v", got, want)
	}
	if len(r.rec.reports()) != 0 {
		t.Fatalf("the requester recorded usage reports: %+v", r.rec.reports())
	}
	// Only u2's answer reached no requester: its tokens are the owner's to
	// count toward the key's limits.
	o.rec.mu.Lock()
	gone := slices.Clone(o.rec.gone)
	o.rec.mu.Unlock()
	if !slices.Equal(gone, []string{"u2"}) {
		t.Fatalf("reports of answers no requester received: %v, want [u2]", gone)
	}
}

// gathered adds up every series of a metric in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// Invariant 7 across instances: the owner refuses an assign beyond the
// node's max_concurrency; the requester waits for the slot and retries.
func TestInvariant7OwnerRefusesOverCommit(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{})
	n := nodetest.Connect(t, o.wsURL, map[string]any{"api_key": "good", "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 1})
	first := run(t, r, context.Background(), tasks.Request{TaskID: "a", TaskType: "echo"}, tasks.Hooks{})
	n.Expect("task_assign")
	// O's own requester takes nothing; a direct assign from "R" beyond the cap is refused.
	second := run(t, r, context.Background(), tasks.Request{TaskID: "b", TaskType: "echo"}, tasks.Hooks{})
	select {
	case m := <-n.Msgs:
		t.Fatalf("node at max_concurrency 1 got %s %v", m.MsgType, m.Payload)
	case <-time.After(100 * time.Millisecond):
	}
	n.Result("a", "completed", "1")
	if got := wait(t, first); got.err != nil {
		t.Fatal(got.err)
	}
	if m := n.Expect("task_assign"); m.TaskID() != "b" {
		t.Fatalf("assign %v", m.Payload)
	}
	n.Result("b", "completed", "2")
	if got := wait(t, second); got.err != nil {
		t.Fatal(got.err)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An answer too large to pass on reaches its requester as an error without
// its usage: the owner's report of it says unseen, so that its tokens are
// still counted toward the key's limits (by the owner).
func TestUsageOfATooLargeAnswerIsUnseen(t *testing.T) {
	b := bus.NewMemory()
	t.Cleanup(func() { _ = b.Close() })
	cfg := tasks.Config{TaskTimeout: time.Minute, ResultMaxBytes: 8}
	o := newInstance(t, "O", b, nil, cfg)
	r := newInstance(t, "R", b, o.hub, cfg)
	n := nodetest.Connect(t, o.wsURL, nodetest.Reg("good", "w", "echo"))
	usage := map[string]any{"prompt_tokens": 2, "completion_tokens": 4}

	small := run(t, r, context.Background(), tasks.Request{TaskID: "s", AccountID: "acct", KeyID: "k", TaskType: "echo"}, tasks.Hooks{})
	n.Expect("task_assign")
	n.MustSend("task_result", map[string]any{"task_id": "s", "status": "completed", "result": "fits", "usage": usage})
	if got := wait(t, small); got.err != nil || got.out.Usage == nil {
		t.Fatalf("the answer that fits: %+v", got)
	}
	big := run(t, r, context.Background(), tasks.Request{TaskID: "b", AccountID: "acct", KeyID: "k", TaskType: "echo"}, tasks.Hooks{})
	n.Expect("task_assign")
	n.MustSend("task_result", map[string]any{"task_id": "b", "status": "completed", "result": "far more than eight bytes", "usage": usage})
	if got := wait(t, big); got.err == nil || tasks.AsError(got.err).Code != tasks.CodeResultTooLarge {
		t.Fatalf("the answer too large: %+v, want %s", got, tasks.CodeResultTooLarge)
	}
	waitUntil(t, func() bool { return len(o.rec.reports()) == 2 })
	o.rec.mu.Lock()
	gone := slices.Clone(o.rec.gone)
	o.rec.mu.Unlock()
	if !slices.Equal(gone, []string{"b"}) {
		t.Fatalf("unseen reports: %v, want [b]", gone)
	}
}
