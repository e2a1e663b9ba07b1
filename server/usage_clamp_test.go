package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// Invariant 18, the bar: a node reporting 1e308 tokens for another
// account's one-byte request charges that account fewer than 1,000. A raw
// node of account C answers account B's request for "x" with
// prompt_tokens 1e308 and completion_tokens 99999999999999999; B's key has
// a daily limit of 1,000 tokens. B's answer, B's quota, the task's record
// and the usage API all say 3 prompt tokens (the bytes the node was sent:
// "x" and params {}) and 1 completion token (the byte it returned), B's
// next request is served, and the instance holding the node counted the
// clamp. Once on one instance, once with the request on B and the node on
// A of a cluster (real Redis and PostgreSQL): the owner clamps before the
// answer crosses, so both instances believe the same figures.
func TestNodeChargesAnotherAccountNoMoreThanItHandled(t *testing.T) {
	t.Run("one instance", func(t *testing.T) {
		ta := startApp(t, nil)
		testChargeClamped(t, ta, ta)
	})
	t.Run("across instances", func(t *testing.T) {
		a, b := startPair(t, "usage_clamp", nil)
		testChargeClamped(t, a, b)
	})
}

// testChargeClamped runs the bar with C's node on owner and B's requests
// on requester.
func testChargeClamped(t *testing.T, owner, requester *testApp) {
	ctx := e2eCtx(t)
	_, keyC, err := owner.store.CreateAccount(ctx, "c", "", "")
	if err != nil {
		t.Fatal(err)
	}
	acctB, keyB, err := owner.store.CreateAccount(ctx, "b", "", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := owner.store.Authenticate(ctx, keyB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.store.SetKeyLimits(ctx, b.KeyID, store.KeyLimits{TokensPerDay: 1000}); err != nil {
		t.Fatal(err)
	}
	n := connectNode(t, owner.wsURL, reg(keyC, "liar", "echo"))
	if requester != owner {
		requester.waitListed(t, n.ID, 0, 0)
	}

	ask := func() result {
		t.Helper()
		ch := requester.requestAsync(keyB, map[string]any{"task_type": "echo", "content": "x"})
		id := n.Expect("task_assign").TaskID()
		n.MustSend("task_result", map[string]any{"task_id": id, "status": "completed", "result": "y",
			"usage": map[string]any{"prompt_tokens": 1e308, "completion_tokens": 99999999999999999}})
		r := waitFor(t, ch, 5*time.Second)
		if r.code != http.StatusOK {
			t.Fatalf("B's request: %d %s, want 200", r.code, r.body)
		}
		var res result
		r.decode(t, &res)
		return res
	}
	res := ask()
	if u := res.Usage; u == nil || u.PromptTokens != 3 || u.CompletionTokens != 1 || u.TotalTokens != 4 {
		t.Fatalf("B's answer has usage %+v, want 3 prompt and 1 completion tokens", u)
	}
	day, month, err := requester.quota.Spent(ctx, b.KeyID, time.Now())
	if err != nil || day.Tokens != 4 || month.Tokens != 4 {
		t.Fatalf("B's quota spent %+v today, %+v this month (%v); want 4 tokens", day, month, err)
	}
	// Well under its limit: B is served again (it was refused 429 until
	// the next month when the node was believed).
	if res := ask(); res.Usage == nil || res.Usage.PromptTokens+res.Usage.CompletionTokens != 4 {
		t.Fatalf("B's second answer has usage %+v, want 4 tokens", res.Usage)
	}

	// The history: the task's record, and the usage API (the owner's
	// reports of the node's answers).
	waitUntil(t, func() bool { return ledgerTokens(t, owner, b.KeyID) == 8 })
	// The reports are the owner's to write, the task records (the
	// requests counted) the requester's.
	for _, w := range []*testApp{owner, requester} {
		if err := w.writer.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var v usageView
	if code, _ := requester.call(t, "GET", "/api/v1/usage", keyB, nil, &v); code != http.StatusOK ||
		v.Total.Requests != 2 || v.Total.PromptTokens != 6 || v.Total.CompletionTokens != 2 {
		t.Fatalf("B's /api/v1/usage: %d %+v, want 2 requests of 3 prompt and 1 completion tokens", code, v.Total)
	}
	var rec store.TaskRecord
	if code, _ := requester.call(t, "GET", "/api/v1/tasks/"+res.TaskID, keyB, nil, &rec); code != http.StatusOK ||
		rec.AccountID != acctB.ID || rec.Usage != (store.Usage{PromptTokens: 3, CompletionTokens: 1}) {
		t.Fatalf("B's task record: %d %+v, want usage of 3 and 1 tokens", code, rec)
	}

	// Counted where the node is, once per report and kind.
	for _, kind := range []string{"prompt", "completion"} {
		name := `switchyard_tasks_usage_clamped_total{bound="bytes",kind="` + kind + `"}`
		if got := metricValue(t, owner, name); got != 2 {
			t.Errorf("%s = %v, want 2", name, got)
		}
	}
}
