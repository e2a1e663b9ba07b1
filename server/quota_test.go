package server

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/ratelimit"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"
)

// A key with a 10,000-token daily limit is refused 429 quota_exceeded on
// the request after the one that crossed it, on both instances of a
// cluster (real Redis and PostgreSQL), with headers saying which limit and
// when it resets; another key of the same account is unaffected. The limit
// is set while both instances have the key cached: they pick it up from
// the database's change sequence, with nothing sent to them.
func TestTokenQuotaAcrossInstances(t *testing.T) {
	// Every task costs 1,000 tokens: 400 prompt, 600 completion.
	q := startLimitedPair(t, "quota", sdk.Usage{PromptTokens: 400, CompletionTokens: 600})
	a, b, limitedKey, freeKey, send := q.a, q.b, q.limitedKey, q.freeKey, q.send
	ctx := e2eCtx(t)
	// Both instances know the key (cached) before it gets its limit.
	for _, ta := range []*testApp{a, b} {
		if code, raw, _ := send(ta, limitedKey); code != http.StatusOK {
			t.Fatalf("before the limit: %d %s", code, raw)
		}
	}
	// Without limits, the key's tokens are in the usage ledger only (no
	// Redis round trip per task); once the ledger has them, the limit is
	// set, and each instance's first check raises the key's totals to them.
	waitUntil(t, func() bool { return ledgerTokens(t, a, q.limitedKeyID) == 2000 })
	if day, _, err := a.quota.Spent(ctx, q.limitedKeyID, time.Now()); err != nil || day.Tokens != 0 {
		t.Fatalf("the key's totals before it has limits: %+v, %v; want nothing counted", day, err)
	}
	k, err := a.store.SetKeyLimits(ctx, q.limitedKeyID, store.KeyLimits{TokensPerDay: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	for _, ta := range []*testApp{a, b} {
		waitUntil(t, func() bool { return ta.cachedLimits(limitedKey).Equal(k.Limits) }) // the instance learns of the limit
	}

	// 2,000 spent; 8 more tasks reach 10,000, alternating instances.
	for i := range 8 {
		if code, raw, _ := send([]*testApp{a, b}[i%2], limitedKey); code != http.StatusOK {
			t.Fatalf("task %d of the limit: %d %s", i+3, code, raw)
		}
	}
	for _, ta := range []*testApp{b, a} {
		code, raw, h := send(ta, limitedKey)
		if code != http.StatusTooManyRequests || !strings.Contains(string(raw), `"quota_exceeded"`) {
			t.Fatalf("over the limit: %d %s, want 429 quota_exceeded", code, raw)
		}
		reset := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour))
		if h.Get("X-Quota-Limit") != "tokens_per_day=10000" || h.Get("X-Quota-Used") != "10000" ||
			h.Get("Retry-After") == "" || h.Get("X-Quota-Reset") != h.Get("Retry-After") ||
			!near(h.Get("Retry-After"), reset) {
			t.Errorf("headers %v, want the day's limit, 10000 used, a reset at UTC midnight (%s)", h, reset)
		}
	}
	// The chat route says it OpenAI's way.
	code, raw, _, err := b.do("POST", "/v1/chat/completions", limitedKey, map[string]any{"model": "gemmanet/chat", "messages": userMsg("x")})
	if err != nil || code != http.StatusTooManyRequests || !strings.Contains(string(raw), `"insufficient_quota"`) {
		t.Errorf("/v1/chat/completions over the limit: %d %s %v", code, raw, err)
	}
	// The other key is unaffected.
	for _, ta := range []*testApp{a, b} {
		if code, raw, _ := send(ta, freeKey); code != http.StatusOK {
			t.Errorf("the key without limits: %d %s", code, raw)
		}
	}
	// Its tokens were never added to the quota totals.
	if day, month, err := b.quota.Spent(ctx, q.freeKeyID, time.Now()); err != nil || day.Tokens != 0 || month.Tokens != 0 {
		t.Errorf("the key without limits has totals %+v, %+v, %v; want none counted", day, month, err)
	}
	// Lifted: served again.
	if _, err := a.store.SetKeyLimits(ctx, k.ID, store.KeyLimits{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return !b.cachedLimits(limitedKey).Any() }) // B learns the limit is lifted
	if code, raw, _ := send(b, limitedKey); code != http.StatusOK {
		t.Errorf("after the limit is lifted: %d %s", code, raw)
	}
}

// quotaRefusal's choice, headers and reset times, by the calendar; and
// it refuses exactly what ratelimit.Limits.Room (the counters' own
// judgement) has no room for.
func TestQuotaRefusal(t *testing.T) {
	now := time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC)
	tok := func(n int64) ratelimit.Amount { return ratelimit.Amount{Tokens: n} }
	for _, c := range []struct {
		l                  store.KeyLimits
		day, month, held   ratelimit.Amount
		status             int
		limit, used, retry string
		heldHeader         string
	}{
		{store.KeyLimits{TokensPerDay: 10}, tok(9), tok(100), tok(0), 0, "", "", "", ""},
		{store.KeyLimits{TokensPerDay: 10}, tok(10), tok(100), tok(0), 429, "tokens_per_day=10", "10", "3600", ""},
		{store.KeyLimits{TokensPerMonth: 100}, tok(50), tok(100), tok(0), 429, "tokens_per_month=100", "100", "3600", ""},
		{store.KeyLimits{TokensPerDay: 10, TokensPerMonth: 100}, tok(12), tok(120), tok(0), 429, "tokens_per_day=10", "12", "3600", ""},
		{store.KeyLimits{}, tok(1e9), tok(1e9), tok(1e9), 0, "", "", "", ""},
		// What the tasks under way hold counts; such a refusal is retried
		// in a second, not at the reset: the holds are settled as they end.
		{store.KeyLimits{TokensPerDay: 10}, tok(9), tok(9), tok(1), 429, "tokens_per_day=10", "9", "1", "1"},
		{store.KeyLimits{TokensPerDay: 10}, tok(0), tok(0), tok(9), 0, "", "", "", ""},
		{store.KeyLimits{TokensPerMonth: 10}, tok(0), tok(3), tok(2000), 429, "tokens_per_month=10", "3", "1", "2000"},
		// Budgets are in units; the counters hold thousandths.
		{store.KeyLimits{BudgetPerDay: 5}, ratelimit.Amount{Units: 4999}, ratelimit.Amount{}, ratelimit.Amount{}, 0, "", "", "", ""},
		{store.KeyLimits{BudgetPerDay: 5}, ratelimit.Amount{Units: 5000}, ratelimit.Amount{}, ratelimit.Amount{}, 402, "budget_per_day=5", "5", "3600", ""},
		{store.KeyLimits{BudgetPerDay: 5}, ratelimit.Amount{Units: 4500}, ratelimit.Amount{Units: 4500}, ratelimit.Amount{Units: 499}, 0, "", "", "", ""},
		{store.KeyLimits{BudgetPerDay: 5}, ratelimit.Amount{Units: 4500}, ratelimit.Amount{Units: 4500}, ratelimit.Amount{Units: 500}, 402, "budget_per_day=5", "4", "1", "1"},
		{store.KeyLimits{BudgetPerMonth: 5, TokensPerDay: 1e6}, tok(3), ratelimit.Amount{Units: 9000}, ratelimit.Amount{}, 402, "budget_per_month=5", "9", "3600", ""},
	} {
		h := http.Header{}
		tot := ratelimit.Totals{Day: c.day, Month: c.month, Held: c.held}
		ae := quotaRefusal(h, c.l, tot, now)
		status, retry := 0, ""
		if ae != nil {
			status, retry = ae.Status, ae.RetryAfter
		}
		if status != c.status || h.Get("X-Quota-Limit") != c.limit || h.Get("X-Quota-Used") != c.used || retry != c.retry ||
			h.Get("X-Quota-Held") != c.heldHeader || (ae != nil && h.Get("X-Quota-Reset") != "3600") {
			t.Errorf("%+v at %+v: %v, headers %v, Retry-After %q; want %d, limit %q, %s used, %q held, retry in %q s", c.l, tot, ae, h, retry,
				c.status, c.limit, c.used, c.heldHeader, c.retry)
		}
		if room := limitsOf(c.l).Room(tot); room != (ae == nil) {
			t.Errorf("%+v at %+v: the counters judge room %v, the refusal %v", c.l, tot, room, ae)
		}
	}
	mid := time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	quotaRefusal(h, store.KeyLimits{TokensPerMonth: 1}, ratelimit.Totals{Month: tok(1)}, mid)
	if want := "1598400"; h.Get("X-Quota-Reset") != want { // 18.5 days to March 1st
		t.Errorf("month reset in %s s, want %s", h.Get("X-Quota-Reset"), want)
	}
}

// A task's spend: its tokens, and at its type's price in thousandths of a
// unit (1 a token for a type without a price).
func TestSpendOf(t *testing.T) {
	a := &App{cfg: Config{TokenPrices: map[string]float64{"chat": 2, "embedding": 0.001}}}
	for _, c := range []struct {
		taskType string
		tokens   int64
		want     ratelimit.Amount
	}{
		{"chat", 1000, ratelimit.Amount{Tokens: 1000, Units: 2_000_000}},
		{"embedding", 3, ratelimit.Amount{Tokens: 3, Units: 3}},
		{"other", 7, ratelimit.Amount{Tokens: 7, Units: 7000}},
	} {
		got := a.spendOf(store.TaskRecord{TaskType: c.taskType, Usage: store.Usage{PromptTokens: c.tokens / 2, CompletionTokens: c.tokens - c.tokens/2}})
		if got != c.want {
			t.Errorf("%s, %d tokens: %+v, want %+v", c.taskType, c.tokens, got, c.want)
		}
	}
}

// The budget bar: a key with a 10,000-unit daily budget at the default
// price (a unit a token), whose tasks cost 1,000 tokens, is refused 402
// budget_exhausted on the request after the tenth, on both instances; the
// other key of the account is unaffected.
func TestBudgetAcrossInstances(t *testing.T) {
	q := startLimitedPair(t, "budget", sdk.Usage{PromptTokens: 250, CompletionTokens: 750})
	a, b, limitedKey, freeKey, send := q.a, q.b, q.limitedKey, q.freeKey, q.send
	if _, err := a.store.SetKeyLimits(e2eCtx(t), q.limitedKeyID, store.KeyLimits{BudgetPerDay: 10_000}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if code, raw, _ := send([]*testApp{a, b}[i%2], limitedKey); code != http.StatusOK {
			t.Fatalf("task %d within the budget: %d %s", i+1, code, raw)
		}
	}
	for _, ta := range []*testApp{a, b} {
		code, raw, h := send(ta, limitedKey)
		if code != http.StatusPaymentRequired || !strings.Contains(string(raw), `"budget_exhausted"`) ||
			h.Get("X-Quota-Limit") != "budget_per_day=10000" || h.Get("X-Quota-Used") != "10000" || h.Get("Retry-After") == "" {
			t.Fatalf("over the budget: %d %s %v, want 402 budget_exhausted naming budget_per_day", code, raw, h)
		}
	}
	for _, ta := range []*testApp{a, b} {
		if code, raw, _ := send(ta, freeKey); code != http.StatusOK {
			t.Errorf("the key without a budget: %d %s", code, raw)
		}
	}
}

// limitedPair is two instances of a cluster (real Redis and PostgreSQL),
// an account with two keys — the one the test limits and a free one — and
// a node (on a, of the free key) whose every chat task reports usage. Each
// task sends as many bytes as its prompt tokens and the node returns as many
// as its completion tokens: a node charges no more than it handled.
type limitedPair struct {
	a, b                                         *testApp
	limitedKey, limitedKeyID, freeKey, freeKeyID string
	// send asks ta for a chat task with key.
	send func(ta *testApp, key string) (int, []byte, http.Header)
}

func startLimitedPair(t *testing.T, schema string, usage sdk.Usage) limitedPair {
	t.Helper()
	a, b := startPair(t, schema, nil)
	ctx := e2eCtx(t)
	acct, limitedKey, err := a.store.CreateAccount(ctx, schema, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, freeKey, err := a.store.CreateKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := a.store.Authenticate(ctx, limitedKey)
	if err != nil {
		t.Fatal(err)
	}
	free, err := a.store.Authenticate(ctx, freeKey)
	if err != nil {
		t.Fatal(err)
	}
	runSDKNode(t, a, sdk.NodeConfig{APIKey: freeKey, Name: "n", Capabilities: []string{"chat"}, MaxConcurrency: 2,
		Handler: sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
			return sdk.Result{Text: strings.Repeat("o", usage.CompletionTokens), Usage: &usage}, nil
		})}).WaitRegistered(t, 5*time.Second)
	send := func(ta *testApp, key string) (int, []byte, http.Header) {
		t.Helper()
		code, raw, h, err := ta.do("POST", "/api/v1/request", key, map[string]any{"task_type": "chat", "content": strings.Repeat("x", usage.PromptTokens)})
		if err != nil {
			t.Fatal(err)
		}
		return code, raw, h
	}
	return limitedPair{a: a, b: b, limitedKey: limitedKey, limitedKeyID: owner.KeyID, freeKey: freeKey, freeKeyID: free.KeyID, send: send}
}

// ledgerTokens is the tokens the usage ledger holds for keyID today.
func ledgerTokens(t *testing.T, ta *testApp, keyID string) int64 {
	t.Helper()
	now := time.Now()
	rows, err := ta.store.Usage(e2eCtx(t), store.UsageQuery{From: now, To: now})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, r := range rows {
		if r.KeyID == keyID {
			n += r.PromptTokens + r.CompletionTokens
		}
	}
	return n
}

// cachedLimits is the limits this instance's auth cache holds for key.
func (ta *testApp) cachedLimits(key string) store.KeyLimits {
	ta.auth.mu.Lock()
	defer ta.auth.mu.Unlock()
	return ta.auth.pos[keyHash(key)].acct.KeyLimits
}

// near reports whether secs (a header's seconds) is within 2 s of d.
func near(secs string, d time.Duration) bool {
	n, err := strconv.Atoi(secs)
	return err == nil && time.Duration(n)*time.Second > d-2*time.Second && time.Duration(n)*time.Second < d+2*time.Second
}

func TestParseTokenPrices(t *testing.T) {
	got, err := ParseTokenPrices(" chat = 2, embedding=0.1 ,free=0")
	if err != nil || len(got) != 3 || got["chat"] != 2 || got["embedding"] != 0.1 || got["free"] != 0 {
		t.Errorf("ParseTokenPrices = %v, %v", got, err)
	}
	if got, err := ParseTokenPrices(""); err != nil || got != nil {
		t.Errorf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"chat", "=1", "chat=-1", "chat=x", "chat=Inf", "chat=NaN", "a=1,a=2"} {
		if _, err := ParseTokenPrices(bad); err == nil {
			t.Errorf("ParseTokenPrices(%q) took it", bad)
		}
	}
	if err := (Config{TokenPrices: map[string]float64{"chat": -1}}).withDefaults().Validate(); err == nil ||
		!strings.Contains(err.Error(), "--token-prices") {
		t.Errorf("a negative price: %v", err)
	}
}

// quotaKeys' choices, by the calendar: which keys' tokens are counted, and
// when their totals are seeded from the ledger.
func TestQuotaKeys(t *testing.T) {
	var q quotaKeys
	day1 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	if !q.counted("k") {
		t.Error("a key never checked here is not counted (an async task's key may be one)")
	}
	if q.note("k", false, day1) || q.counted("k") {
		t.Error("a key without limits is seeded or counted")
	}
	if !q.note("k", true, day1) || !q.counted("k") {
		t.Fatal("a key whose limits appear is not seeded, or not counted")
	}
	if q.note("k", true, day1.Add(time.Second)) {
		t.Error("a second seeding started while the first may still run")
	}
	// The first failed (nothing recorded): tried again after seedRetry.
	if !q.note("k", true, day1.Add(seedRetry)) {
		t.Fatal("a failed seeding is never tried again")
	}
	q.seeded("k", day1.Add(seedRetry))
	if q.note("k", true, day1.Add(time.Hour)) {
		t.Error("seeded twice in a day")
	}
	if !q.note("k", true, day1.Add(14*time.Hour)) { // 00:00 UTC the next day
		t.Error("not seeded on a new day")
	}
	q.seeded("k", day1.Add(14*time.Hour))
	// Limits lifted then set again the same day: what was spent meanwhile
	// is only in the ledger.
	if q.note("k", false, day1.Add(15*time.Hour)) || q.counted("k") {
		t.Error("a key whose limits were lifted is still counted")
	}
	if !q.note("k", true, day1.Add(15*time.Hour+time.Second)) {
		t.Error("limits set again are not seeded")
	}
	if q.note("", true, day1) {
		t.Error("a request without a key is seeded")
	}
}

// A client that leaves while a node that cannot be told to stop runs its
// task does not take the task's tokens off its key's limits: the node's
// answer reaches no requester, and the instance holding the node counts
// them (in the ledger, and toward the limits). Without that, leaving just
// before each answer would spend a budget without end.
func TestTokensOfAnAbandonedTaskCount(t *testing.T) {
	ta := startApp(t, nil)
	ctx := e2eCtx(t)
	_, key, err := ta.store.CreateAccount(ctx, "leaver", "", "")
	if err != nil {
		t.Fatal(err)
	}
	acct, err := ta.store.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ta.store.SetKeyLimits(ctx, acct.KeyID, store.KeyLimits{TokensPerDay: 10_000}); err != nil {
		t.Fatal(err)
	}
	// GemmaNet's node: no task_cancel, so a cancelled task runs to its end.
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "gemmanet", "capabilities": []string{"echo"}, "max_concurrency": 1})

	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := plainAsync(rctx, ta, key)
	id := n.Expect("task_assign").TaskID()
	cancel() // the client leaves before the answer
	waitFor(t, done, 3*time.Second)
	ta.waitHolding(t, 1)
	// As many tokens as the node handled (a node charges no more): the 3
	// bytes it was sent ("x" and params {}), the 997 it returns.
	n.MustSend("task_result", map[string]any{"task_id": id, "status": "completed", "result": strings.Repeat("l", 997),
		"usage": map[string]any{"prompt_tokens": 3, "completion_tokens": 997}})

	waitUntil(t, func() bool {
		day, _, err := ta.quota.Spent(ctx, acct.KeyID, time.Now())
		return err == nil && day.Tokens == 1000
	})
	waitUntil(t, func() bool { return ledgerTokens(t, ta, acct.KeyID) == 1000 })
}

// A limited key's request holds, while it runs, its prompt's bytes and its
// max_tokens (on the instance where it landed, through Redis: the node is
// on the other); its end replaces the hold with the tokens the node
// reported before the answer is sent; a request that fails or whose
// client leaves gives its hold back. A key without limits holds nothing.
func TestQuotaHoldLifecycle(t *testing.T) {
	a, b := startPair(t, "holds", nil)
	ctx := e2eCtx(t)
	acct, key, err := a.store.CreateAccount(ctx, "holder", "", "")
	if err != nil {
		t.Fatal(err)
	}
	owner, err := a.store.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	keyID := owner.KeyID
	if _, err := a.store.SetKeyLimits(ctx, keyID, store.KeyLimits{TokensPerDay: 10_000, BudgetPerMonth: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	_, freeKey, err := a.store.CreateKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := connectNode(t, a.wsURL, map[string]any{"api_key": freeKey, "name": "n", "capabilities": []string{"chat"}, "max_concurrency": 2})
	totals := func() ratelimit.Totals {
		t.Helper()
		tot, _, err := b.quota.Reserve(ctx, keyID, ratelimit.Limits{}, ratelimit.Hold{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tot
	}

	// 5 bytes of content, 17 of params, 50 max_tokens: 72 tokens held, at a
	// unit a token (in thousandths) against the budget.
	body := map[string]any{"task_type": "chat", "content": "hello", "params": map[string]any{"max_tokens": 50}}
	done := b.requestAsync(key, body)
	id := n.Expect("task_assign").TaskID()
	if got := totals(); got.Held != (ratelimit.Amount{Tokens: 72, Units: 72_000}) || got.Day.Tokens != 0 {
		t.Fatalf("while the task runs: %+v; want 72 tokens (72,000 units) held, nothing spent", got)
	}
	// 20 completion tokens need 20 bytes of result: a node charges no
	// more than it returned (tasks' clamp).
	n.MustSend("task_result", map[string]any{"task_id": id, "status": "completed", "result": strings.Repeat("x", 20),
		"usage": map[string]any{"prompt_tokens": 3, "completion_tokens": 20}})
	if r := waitFor(t, done, 5*time.Second); r.code != http.StatusOK {
		t.Fatalf("the request: %d %s", r.code, r.body)
	}
	if got := totals(); got != (ratelimit.Totals{Day: ratelimit.Amount{Tokens: 23, Units: 23_000}, Month: ratelimit.Amount{Tokens: 23, Units: 23_000}}) {
		t.Fatalf("after the answer: %+v; want the 23 tokens used spent, nothing held", got)
	}

	// Failed before a node had it: given back.
	if code, raw, _, err := b.do("POST", "/api/v1/request", key, map[string]any{"task_type": "nobody-serves-this", "content": "x"}); err != nil || code != http.StatusNotFound {
		t.Fatalf("a request no node serves: %d %s %v", code, raw, err)
	}
	if got := totals(); got.Held != (ratelimit.Amount{}) || got.Day.Tokens != 23 {
		t.Fatalf("after a request no node served: %+v; want nothing held, 23 spent", got)
	}
	// The client left while the node had it: given back (a node that goes
	// on to answer has its tokens counted by its own instance: spendOrphan).
	rctx, cancel := context.WithCancel(ctx)
	left := async(func() error {
		req, _ := http.NewRequestWithContext(rctx, "POST", b.url+"/api/v1/request", strings.NewReader(`{"task_type":"chat","content":"bye"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	n.Expect("task_assign")
	if got := totals(); got.Held.Tokens != 3+2+1024 {
		t.Fatalf("while the second task runs: %+v; want 3 + 2 bytes and the default completion estimate (1,024) held", got)
	}
	cancel()
	waitFor(t, left, 5*time.Second)
	waitUntil(t, func() bool { return totals().Held == ratelimit.Amount{} })

	// A key without limits holds nothing: no counters at all.
	done = b.requestAsync(freeKey, body)
	id = n.Expect("task_assign").TaskID()
	n.Result(id, "completed", "x")
	if r := waitFor(t, done, 5*time.Second); r.code != http.StatusOK {
		t.Fatalf("the key without limits: %d %s", r.code, r.body)
	}
	free, err := a.store.Authenticate(ctx, freeKey)
	if err != nil {
		t.Fatal(err)
	}
	rdb := a.cluster.conn.Client()
	if n, err := rdb.Exists(ctx, ratelimit.QuotaPrefix(a.cfg.Namespace)+"{"+free.KeyID+"}:h").Result(); err != nil || n != 0 {
		t.Errorf("the key without limits has holds in Redis (%d, %v)", n, err)
	}
}

// What a request holds: its content's and params' bytes, and its
// max_tokens as the clamp reads it (tasks.MaxTokens) or the default
// estimate; a split one gives each part the
// params and their max_tokens; at its type's price.
func TestHoldOf(t *testing.T) {
	a := &App{cfg: Config{TokenPrices: map[string]float64{"chat": 2.5}}.withDefaults()}
	p := func(s string) json.RawMessage { return json.RawMessage(s) }
	for _, c := range []struct {
		taskType, content string
		params            json.RawMessage
		split             bool
		want              int64 // tokens
	}{
		{"echo", "hello", p(`{}`), false, 5 + 2 + 1024},
		{"echo", "hello", nil, false, 5 + 1024},
		{"echo", "hello", p(`{"max_tokens":50}`), false, 5 + 17 + 50},
		{"echo", "hello", p(`{"max_tokens":49.2}`), false, 5 + 19 + 1024}, // not a bound the clamp takes: the estimate
		{"echo", "hello", p(`{"max_tokens":-7}`), false, 5 + 17 + 1024},
		{"echo", "hello", p(`{"max_tokens":"50"}`), false, 5 + 19 + 1024},
		{"echo", "hello", p(`{"max_tokens":null}`), false, 5 + 19 + 1024},
		{"echo", "hello", p(`{"Max_Tokens":5}`), false, 5 + 16 + 1024},
		{"echo", "hello", p(`{"max_tokens":1,"max_tokens":90}`), false, 5 + 32 + 90},
		{"echo", "hello", p(`{"max_\u0074okens":9}`), false, 5 + 21 + 1024}, // nor one spelled with escapes
		{"echo", "x", p(`{"max_tokens":1e300}`), false, ratelimit.MaxHold},
		{"translate", "abc", p(`{"max_tokens":10}`), true, 3 + 3*(17+10)},
		{"chat", "hi", p(`{"max_tokens":8}`), false, 2 + 16 + 8},
	} {
		got := a.holdOf(tasks.Request{TaskType: c.taskType, Content: c.content, Params: c.params}, c.split)
		price := map[string]float64{"chat": 2.5}[c.taskType]
		if price == 0 {
			price = 1
		}
		if got.Tokens != c.want || got.Units != int64(math.Ceil(min(float64(c.want)*price*unitScale, ratelimit.MaxHold))) {
			t.Errorf("%s %q %s split %v: holds %+v, want %d tokens at %v", c.taskType, c.content, c.params, c.split, got, c.want, price)
		}
	}
}

// slowSpends is a Quota whose Spend waits for its context to end (as a
// stalled Redis's would), and says when it has returned.
type slowSpends struct {
	ratelimit.Quota
	entered chan struct{}
	done    atomic.Bool
}

func (q *slowSpends) Spend(ctx context.Context, key string, a ratelimit.Amount, now time.Time) error {
	close(q.entered)
	<-ctx.Done()
	q.done.Store(true)
	return ctx.Err()
}

// An orphaned task's spend is one of the App's runs: the drain waits for
// it (after the engine, before the Redis client closes) instead of
// returning while it is under way in a goroutine nothing waits for.
func TestOrphanSpendEndsBeforeTheAppStops(t *testing.T) {
	q := &slowSpends{entered: make(chan struct{})}
	ta := startAppWith(t, nil, func(a *App) { q.Quota = a.quota; a.quota = q })
	ta.quotaKeys.note("key-1", true, time.Now())
	ta.spendOrphan(store.UsageReport{KeyID: "key-1", TaskType: "echo", PromptTokens: 3, At: time.Now()})
	<-q.entered
	ta.stop()
	if !q.done.Load() {
		t.Fatal("the App stopped while an orphan's spend was under way")
	}
}
