package tasks_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"
)

// absurd is the usage a lying node reports: far past any int, as JSON
// allows.
var absurd = map[string]any{"prompt_tokens": 1e308, "completion_tokens": 99999999999999999}

// clampedBy reads one series of switchyard_tasks_usage_clamped_total.
func clampedBy(t *testing.T, reg *prometheus.Registry, kind, bound string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_tasks_usage_clamped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["kind"] == kind && got["bound"] == bound {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Invariant 18: the tokens a node reports are held to what it handled
// before anyone believes them. A node on O answers R's requests with usage
// past any int; R's outcome (what the client is told, what its key
// spends), R's record and O's usage report (the history) all carry the
// same clamped figures: prompt tokens no more than the bytes the node was
// sent (content and params), completion tokens no more than the bytes the
// client got back (a stream's deltas, a held one's included; a plain
// task's result) or the request's max_tokens.
func TestNodeChargesNoMoreThanItHandled(t *testing.T) {
	b := bus.NewMemory()
	t.Cleanup(func() { _ = b.Close() })
	reg := prometheus.NewRegistry()
	o := newInstance(t, "O", b, nil, tasks.Config{Registerer: reg})
	r := newInstance(t, "R", b, o.hub, tasks.Config{})
	n := nodetest.Connect(t, o.wsURL, nodetest.Reg("good", "w", "echo"))
	answer := func(id, result string) {
		n.MustSend("task_result", map[string]any{"task_id": id, "status": "completed", "result": result, "usage": absurd})
	}
	reported := func(id string) store.UsageReport {
		t.Helper()
		var rep store.UsageReport
		waitUntil(t, func() bool {
			for _, u := range o.rec.reports() {
				if u.TaskID == id {
					rep = u
					return true
				}
			}
			return false
		})
		return rep
	}
	recorded := func(id string) store.Usage {
		t.Helper()
		r.rec.mu.Lock()
		defer r.rec.mu.Unlock()
		for _, rec := range r.rec.tasks {
			if rec.ID == id {
				return rec.Usage
			}
		}
		t.Fatalf("R recorded no task %s", id)
		return store.Usage{}
	}
	cases := []struct {
		name   string
		req    tasks.Request
		answer func(id string)
		want   store.Usage
	}{
		{"one byte, plain", tasks.Request{Content: "x"}, func(id string) { answer(id, "y") },
			store.Usage{PromptTokens: 3, CompletionTokens: 1}}, // "x" and params {}; "y"
		{"params count as sent", tasks.Request{Content: "x", Params: []byte(`{"temperature":0.5}`)}, func(id string) { answer(id, "") },
			store.Usage{PromptTokens: 20, CompletionTokens: 0}},
		{"max_tokens", tasks.Request{Content: "abc", Params: []byte(`{"max_tokens":2}`)}, func(id string) { answer(id, "twelve bytes") },
			store.Usage{PromptTokens: 19, CompletionTokens: 2}},
		{"a stream's deltas, not its result", tasks.Request{Content: "x", Stream: true}, func(id string) {
			n.Chunk(id, "ab")
			n.Chunk(id, "cde")
			answer(id, strings.Repeat("not what the client got", 10))
		}, store.Usage{PromptTokens: 3, CompletionTokens: 5}},
		{"a stream that streamed nothing: its result", tasks.Request{Content: "x", Stream: true}, func(id string) { answer(id, "four") },
			store.Usage{PromptTokens: 3, CompletionTokens: 4}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			req.TaskID, req.AccountID, req.KeyID, req.TaskType = fmt.Sprint("t", i), "B", "key-b", "echo"
			ch := run(t, r, context.Background(), req, tasks.Hooks{Chunk: func(string) error { return nil }})
			c.answer(n.Expect("task_assign").TaskID())
			got := wait(t, ch)
			if got.err != nil || got.out.Usage == nil || *got.out.Usage != c.want {
				t.Fatalf("the requester's outcome %+v %v, want usage %+v", got.out, got.err, c.want)
			}
			if u := recorded(req.TaskID); u != c.want {
				t.Errorf("R's record has usage %+v, want %+v", u, c.want)
			}
			if rep := reported(req.TaskID); rep.PromptTokens != c.want.PromptTokens || rep.CompletionTokens != c.want.CompletionTokens {
				t.Errorf("O's usage report %+v, want %+v", rep, c.want)
			}
		})
	}

	// A stream whose client left, on a node that was not told (it did not
	// declare task_cancel): nobody hears its answer, but its report is
	// charged (unseen), held to every delta it streamed, those after the
	// cancel included.
	ctx, cancel := context.WithCancel(context.Background())
	streamed := make(chan struct{}, 1)
	ch := run(t, r, ctx, tasks.Request{TaskID: "held", AccountID: "B", KeyID: "key-b", TaskType: "echo", Content: "x", Stream: true},
		tasks.Hooks{Chunk: func(string) error { streamed <- struct{}{}; return nil }})
	n.Expect("task_assign")
	n.Chunk("held", "ab")
	<-streamed
	cancel()
	if got := wait(t, ch); code(got.err) != tasks.CodeCanceled {
		t.Fatalf("the abandoned stream: %+v", got)
	}
	waitUntil(t, func() bool { return o.eng.Holding() == 1 })
	n.Chunk("held", "cdef")
	answer("held", "")
	if rep := reported("held"); rep.PromptTokens != 3 || rep.CompletionTokens != 6 {
		t.Errorf("the held stream's report %+v, want 3 prompt and 6 completion tokens", rep)
	}

	// Every report was cut: the prompts by their bytes, the completions by
	// their bytes but the one by its max_tokens.
	reports := float64(len(cases) + 1)
	if p, cb, cm := clampedBy(t, reg, "prompt", "bytes"), clampedBy(t, reg, "completion", "bytes"), clampedBy(t, reg, "completion", "max_tokens"); p != reports || cb != reports-1 || cm != 1 {
		t.Errorf("usage_clamped_total: prompt/bytes %v, completion/bytes %v, completion/max_tokens %v; want %v, %v, 1", p, cb, cm, reports, reports-1)
	}
}

// A split task's parts are clamped each by its own bytes, and the task's
// usage is their sum.
func TestSplitPartsChargeTheirOwnBytes(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{})
	n := nodetest.Connect(t, o.wsURL, map[string]any{"api_key": "good", "name": "solo", "capabilities": []string{"translate"}, "max_concurrency": 3})
	ch := make(chan outcome, 1)
	go func() {
		out, err := r.eng.RunSplit(context.Background(), tasks.Request{TaskID: "s", AccountID: "B", TaskType: "translate",
			Content: "aaaa\n\nbb\n\nc"}, tasks.Hooks{})
		ch <- outcome{out, err}
	}()
	for range 3 {
		m := n.Expect("task_assign")
		n.MustSend("task_result", map[string]any{"task_id": m.TaskID(), "status": "completed",
			"result": strings.ToUpper(m.Payload["content"].(string)), "usage": absurd})
	}
	got := wait(t, ch)
	// Parts of 4, 2 and 1 bytes, each with params {}; results as long.
	want := store.Usage{PromptTokens: 6 + 4 + 3, CompletionTokens: 4 + 2 + 1}
	if got.err != nil || got.out.Usage == nil || *got.out.Usage != want {
		t.Fatalf("%+v %v, want usage %+v", got.out, got.err, want)
	}
}

// A node whose usage reports keep claiming far more than it handled is
// quarantined like one whose tasks keep failing: after five in a row for
// at least two accounts. One account alone cannot do it, a plausible
// report ends the run, and requests crafted to make an honest node look
// dishonest (a one-byte content, max_tokens 0, which the node ignores;
// a chat template's tokens the coordinator never sent) do not count
// against it at all, from any number of accounts.
func TestImplausibleUsageQuarantinesTheNode(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{})
	asked := 0
	ask := func(n *nodetest.Node, account, params, result string, usage map[string]any) {
		t.Helper()
		asked++
		ch := run(t, r, context.Background(), tasks.Request{TaskID: fmt.Sprint("q", asked), AccountID: account,
			TaskType: "echo", Content: "x", Params: []byte(params)}, tasks.Hooks{})
		n.MustSend("task_result", map[string]any{"task_id": n.Expect("task_assign").TaskID(), "status": "completed", "result": result, "usage": usage})
		if got := wait(t, ch); got.err != nil {
			t.Fatal(got.err)
		}
	}
	state := func(n *nodetest.Node) (string, string) {
		t.Helper()
		s := o.hub.Session(n.ID)
		if s == nil {
			t.Fatal("the node is not connected")
		}
		return s.State()
	}

	// An honest node, asked by two accounts for one byte with max_tokens 0:
	// it counts its chat template (40 tokens) and answers 300 bytes, as
	// many tokens. Both are clamped; neither is held against it.
	honest := nodetest.Connect(t, o.wsURL, nodetest.Reg("good", "honest", "echo"))
	for i := range 12 {
		ask(honest, []string{"B", "D"}[i%2], `{"max_tokens":0}`, strings.Repeat("z", 300),
			map[string]any{"prompt_tokens": 3 + 40, "completion_tokens": 300})
		if st, why := state(honest); st != nodes.StateServing {
			t.Fatalf("the honest node, after %d crafted requests of two accounts: %s (%s), want serving", i+1, st, why)
		}
	}
	_ = honest.Conn.CloseNow()
	waitUntil(t, func() bool { return o.hub.Session(honest.ID) == nil })

	liar := nodetest.Connect(t, o.wsURL, nodetest.Reg("good", "liar", "echo"))
	for range 6 { // one account alone
		ask(liar, "B", "", "y", absurd)
	}
	if st, _ := state(liar); st != nodes.StateServing {
		t.Fatalf("after one account's implausible reports the node is %s, want serving", st)
	}
	ask(liar, "D", "", "y", map[string]any{"prompt_tokens": 3, "completion_tokens": 1}) // plausible: the run ends
	for i := range 4 {
		ask(liar, []string{"B", "D"}[i%2], "", "y", absurd)
	}
	if st, _ := state(liar); st != nodes.StateServing {
		t.Fatalf("four implausible reports since a plausible one: %s, want serving", st)
	}
	ask(liar, "B", "", "y", absurd)
	if st, why := state(liar); st != nodes.StateQuarantined || !strings.Contains(why, "5 usage reports in a row were implausible") {
		t.Fatalf("after five implausible reports for two accounts: %s %q, want quarantined for its usage reports", st, why)
	}
}
