package server

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/store"
)

// The usage API's totals are what the nodes reported, per key, exactly: two
// keys of one account and a key of another send tasks of two types to
// nodes that report usage derived from the content; the account sees its
// own usage only, by key, task type and day, as JSON and CSV; the operator
// sees every account's.
func TestUsageTotalsEqualWhatNodesReported(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.AdminToken = "admin-token-for-usage-tests" })
	ctx := e2eCtx(t)
	acct, key1, err := ta.store.CreateAccount(ctx, "metered", "", "")
	if err != nil {
		t.Fatal(err)
	}
	k2, key2, err := ta.store.CreateKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	other := ta.account(t, "other", "")
	keys, err := ta.store.ListKeys(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	var k1 string
	for _, k := range keys {
		if k.ID != k2.ID {
			k1 = k.ID
		}
	}

	// A node's usage for a content of n characters: n prompt tokens, 2n
	// completion tokens.
	handler := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
		n := len(task.Content)
		res := sdk.Result{Text: task.Content, Usage: &sdk.Usage{PromptTokens: n, CompletionTokens: 2 * n}}
		return res, nil
	})
	for _, caps := range [][]string{{"chat"}, {"embed"}} {
		runSDKNode(t, ta, sdk.NodeConfig{APIKey: key1, Name: caps[0], Capabilities: caps, MaxConcurrency: 4, Handler: handler}).
			WaitRegistered(t, 5*time.Second)
	}

	type want struct{ requests, prompt, completion int64 }
	sent := map[[2]string]*want{} // by key id and task type
	var otherPrompt int64         // the other account's
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range []struct {
		key, keyID string
		n          int
	}{{key1, k1, 13}, {key2, k2.ID, 7}, {other, "", 5}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := e2eClient(t, ta, c.key)
			for j := range c.n {
				tt := []string{"chat", "embed"}[j%2]
				content := strings.Repeat("x", 1+i*10+j)
				res, err := cl.Request(ctx, sdk.Request{TaskType: tt, Content: content})
				if err != nil || res.Usage == nil {
					t.Errorf("request %d of key %d: %+v, %v", j, i, res, err)
					return
				}
				mu.Lock()
				if c.keyID == "" {
					otherPrompt += int64(res.Usage.PromptTokens)
					mu.Unlock()
					continue
				}
				w := sent[[2]string{c.keyID, tt}]
				if w == nil {
					w = &want{}
					sent[[2]string{c.keyID, tt}] = w
				}
				w.requests++
				w.prompt += int64(res.Usage.PromptTokens)
				w.completion += int64(res.Usage.CompletionTokens)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// A task's tokens are the owner's report of its node's answer, made
	// once the answer is passed on: the last reports may reach the writer
	// after their clients have the answers. Flush until every token sent
	// is in (the rows are judged below, on that view).
	var v usageView
	var tokens int64
	for _, w := range sent {
		tokens += w.prompt + w.completion
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := ta.writer.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		v = usageView{}
		if code, _ := ta.call(t, "GET", "/api/v1/usage?group_by=key,task_type", key2, nil, &v); code != http.StatusOK {
			t.Fatalf("GET /api/v1/usage: %d", code)
		}
		var got int64
		for _, r := range v.Rows {
			got += r.PromptTokens + r.CompletionTokens
		}
		if got >= tokens || time.Now().After(deadline) {
			break
		}
	}
	if len(v.Rows) != len(sent) {
		t.Fatalf("%d rows %+v, want %d (each key and type of this account)", len(v.Rows), v.Rows, len(sent))
	}
	var total store.UsageTotals
	for _, r := range v.Rows {
		w := sent[[2]string{r.KeyID, r.TaskType}]
		if w == nil || r.Requests != w.requests || r.Completed != w.requests || r.PromptTokens != w.prompt || r.CompletionTokens != w.completion {
			t.Errorf("row %+v, want %+v", r, w)
		}
		if r.AccountID != "" || r.Day != "" {
			t.Errorf("row %+v names an account or a day it was not grouped by", r)
		}
		total.Requests += r.Requests
		total.PromptTokens += r.PromptTokens
	}
	if v.Total.Requests != 20 || v.Total.Requests != total.Requests || v.Total.PromptTokens != total.PromptTokens {
		t.Errorf("total %+v, want the rows' sum (20 requests, %d prompt tokens)", v.Total, total.PromptTokens)
	}
	today := time.Now().UTC().Format(store.DayLayout)
	if v.To != today || v.From != time.Now().UTC().AddDate(0, 0, -29).Format(store.DayLayout) {
		t.Errorf("range %s..%s, want the last 30 days to %s", v.From, v.To, today)
	}

	// The Prometheus counters, by task type (not by key: cardinality).
	var prompt int64
	for _, w := range sent {
		prompt += w.prompt
	}
	if got := counterValue(t, ta, "switchyard_tasks_tokens_total", map[string]string{"kind": "prompt"}); got != float64(prompt+otherPrompt) {
		t.Errorf("switchyard_tasks_tokens_total{kind=prompt} = %v, want %d", got, prompt+otherPrompt)
	}

	// By day: one row, today's.
	if code, _ := ta.call(t, "GET", "/api/v1/usage?group_by=day&from="+today+"&to="+today, key1, nil, &v); code != http.StatusOK ||
		len(v.Rows) != 1 || v.Rows[0].Day != today || v.Rows[0].Requests != 20 {
		t.Errorf("by day: %d %+v, want one row of 20 requests today", code, v.Rows)
	}
	// Another day: nothing.
	if code, _ := ta.call(t, "GET", "/api/v1/usage?from=2020-01-01&to=2020-01-31", key1, nil, &v); code != http.StatusOK ||
		len(v.Rows) != 0 || v.Total.Requests != 0 {
		t.Errorf("January 2020: %d %+v, want no rows", code, v)
	}

	// CSV.
	code, raw, h, err := ta.do("GET", "/api/v1/usage?group_by=key&format=csv", key1, nil)
	if err != nil || code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/csv") {
		t.Fatalf("CSV: %d %v %q", code, err, h.Get("Content-Type"))
	}
	recs, err := csv.NewReader(strings.NewReader(string(raw))).ReadAll()
	if err != nil || len(recs) != 3 || strings.Join(recs[0], ",") != "key_id,requests,completed,prompt_tokens,completion_tokens,node_ms,content_bytes,result_bytes" {
		t.Fatalf("CSV %q (%v), want a header and a row per key", raw, err)
	}
	for _, rec := range recs[1:] {
		var prompt int64
		for tt := range []string{"chat", "embed"} {
			if w := sent[[2]string{rec[0], []string{"chat", "embed"}[tt]}]; w != nil {
				prompt += w.prompt
			}
		}
		if rec[3] != fmt.Sprint(prompt) {
			t.Errorf("CSV row %q: prompt tokens %s, want %d", rec, rec[3], prompt)
		}
	}

	// The operator's view: every account, grouped by account.
	code, raw, _, err = ta.do("GET", "/admin/api/usage?group_by=account", "admin-token-for-usage-tests", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("admin usage: %d %v %s", code, err, raw)
	}
	if code, _ := ta.call(t, "GET", "/admin/api/usage?group_by=account", "admin-token-for-usage-tests", nil, &v); code != http.StatusOK ||
		len(v.Rows) != 2 || v.Total.Requests != 25 {
		t.Errorf("admin by account: %d %+v, want two accounts, 25 requests", code, v)
	}
	if code, _ := ta.call(t, "GET", "/admin/api/usage?account_id="+acct.ID, "admin-token-for-usage-tests", nil, &v); code != http.StatusOK || v.Total.Requests != 20 {
		t.Errorf("admin, one account: %d %+v, want 20 requests", code, v)
	}

	// Bad queries, and no key.
	for _, q := range []string{"from=yesterday", "to=2026-13-01", "from=2026-02-01&to=2026-01-01", "from=2020-01-01&to=2026-01-01",
		"group_by=colour", "group_by=account", "format=xml", "group_by=key;drop", "group_by=key,key", "grup_by=key",
		"from=2026-01-01&from=2026-01-02"} {
		var e apiErr
		if code, _ := ta.call(t, "GET", "/api/v1/usage?"+q, key1, nil, &e); code != http.StatusBadRequest || e.Error.Code != string(CodeInvalidRequest) {
			t.Errorf("?%s: %d %+v, want 400 invalid_request", q, code, e)
		}
	}
	if code, _, _, _ := ta.do("GET", "/api/v1/usage", "", nil); code != http.StatusUnauthorized {
		t.Errorf("no key: %d, want 401", code)
	}
	if code, _, _, _ := ta.do("GET", "/admin/api/usage", key1, nil); code != http.StatusUnauthorized {
		t.Errorf("an API key on the admin route: %d, want 401", code)
	}
}

// The usage API refuses what it does not know instead of ignoring it: an
// unknown parameter, format or grouping, a parameter given twice, a
// grouping named twice (so group_by is at most the distinct groupings: a
// 63 KB group_by=key,key,… answered a 25 MB CSV), and a query that does not
// parse (group_by=key;drop was dropped whole, and answered the total).
// Each refusal names what is allowed.
func TestUsageQueryRefusesWhatItDoesNotKnow(t *testing.T) {
	now := time.Date(2026, 3, 10, 15, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		query string
		admin bool
		says  string // "" for accepted
		by    string
		csv   bool
	}{
		{query: "", by: ""},
		{query: "group_by=key,task_type,day&format=csv", by: "key,task_type,day", csv: true},
		{query: "group_by=day,%20key&format=json&from=2026-03-01&to=2026-03-09", by: "day,key"},
		{query: "group_by=account,key,task_type,day&account_id=a1", admin: true, by: "account,key,task_type,day"},
		{query: "format=xml", says: "format takes json or csv"},
		{query: "format=CSV", says: "format takes json or csv"},
		{query: "group_by=key;drop", says: "does not parse"},
		{query: "from=2026-03-01;to=2026-03-02", says: "does not parse"},
		{query: "group_by=%zz", says: "does not parse"},
		{query: "group_by=colour", says: "group_by takes key, task_type or day"},
		{query: "group_by=account", says: "/admin/api/usage"},
		{query: "group_by=colour", admin: true, says: "group_by takes account, key, task_type or day"},
		{query: "group_by=key,,day", says: "group_by takes key, task_type or day"},
		{query: "group_by=key,key", says: "names key twice"},
		{query: "group_by=key,%20key", says: "names key twice"},
		{query: "group_by=" + strings.Repeat("key,", 10_500) + "key", says: "names key twice"},
		{query: "group_by=key&group_by=day", says: "group_by is given twice"},
		{query: "from=2026-03-01&from=2026-03-02", says: "from is given twice"},
		{query: "format=csv&format=csv", says: "format is given twice"},
		{query: "grup_by=key", says: `unknown parameter "grup_by"; /api/v1/usage takes from, to, group_by and format`},
		{query: "account_id=a1", says: `unknown parameter "account_id"`},
		{query: "limit=5", admin: true, says: `/admin/api/usage takes from, to, group_by, format and account_id`},
		{query: strings.Repeat("x", 500) + "=1", says: "unknown parameter"},
		{query: "account_id=" + strings.Repeat("a", 200), admin: true, says: "account_id is longer than"},
		{query: "from=yesterday", says: "from must be a day"},
		{query: "to=2026-13-01", says: "to must be a day"},
	} {
		u, err := parseUsageQuery(tc.query, now, tc.admin)
		what := clip(tc.query, 60)
		if tc.says == "" {
			if err != nil || strings.Join(u.by, ",") != tc.by || u.csv != tc.csv {
				t.Errorf("?%s (admin %v): %+v %v, want group_by %q, csv %v", what, tc.admin, u, err, tc.by, tc.csv)
			}
			continue
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != CodeInvalidRequest || !strings.Contains(ae.Message, tc.says) {
			t.Errorf("?%s (admin %v): %v, want 400 invalid_request saying %q", what, tc.admin, err, tc.says)
		} else if len(ae.Message) > 200 {
			t.Errorf("?%s: a %d-byte message: %.200s…", what, len(ae.Message), ae.Message)
		}
	}
}

// A usage CSV's cells (task types are chosen by nodes, so by anyone with a
// key) never start the way a spreadsheet starts a formula: OWASP's
// characters (= + - @, tab, carriage return), and what a spreadsheet skips
// or reads alike before one: a leading space, line feed or other control
// or Unicode space or format character, the full-width and small forms.
func TestCSVSafe(t *testing.T) {
	for _, tc := range []struct {
		in      string
		escaped bool
	}{
		{"chat", false}, {"", false}, {"day-2", false}, {"a=1", false}, {"'already", false}, {"日本語", false}, {"1+1", false},
		{"=1+1", true}, {"+1", true}, {"-1", true}, {"@SUM(A1)", true},
		{"\t=1", true}, {"\r=1", true}, {"\n=1", true}, {" =1", true}, {"\x00=1", true}, {"\x1b=1", true}, {"\x7f=1", true},
		{"\u00a0=1", true}, {"\u3000=1", true}, {"\u2028=1", true}, {"\u200b=1", true}, {"\ufeff=1", true}, {"\u0085=1", true},
		{"＝1+1", true}, {"＋1", true}, {"－1", true}, {"＠SUM(A1)", true},
		{"﹦1", true}, {"﹢1", true}, {"﹣1", true}, {"﹫1", true}, {"−1", true},
		{"\xff=1", true}, // not UTF-8: a spreadsheet's guess at its encoding decides what it is
	} {
		got := csvSafe(tc.in)
		want := tc.in
		if tc.escaped {
			want = "'" + tc.in
		}
		if got != want {
			t.Errorf("csvSafe(%q) = %q, want %q", tc.in, got, want)
		}
	}
}
