package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// Session affinity across a cluster: 20 turns of one session, sent
// alternately to two instances (real Redis and PostgreSQL), reach one of
// four nodes (two on each instance) every time its slot is free; so do the
// turns of a chat whose body names the session (user); another account's
// session of the same id is its own.
func TestSessionAffinityAcrossInstances(t *testing.T) {
	a, b := startPair(t, "affinity", nil)
	key := a.account(t, "aff", "")
	other := a.account(t, "other", "")
	handler := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
		return sdk.Result{Text: "ok"}, nil
	})
	for i, ta := range []*testApp{a, a, b, b} {
		runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "n" + string(rune('0'+i)), Capabilities: []string{"chat"}, MaxConcurrency: 1,
			Handler: handler}).WaitRegistered(t, 5*time.Second)
	}

	turns := func(t *testing.T, send func(ta *testApp) (int, []byte)) map[string]int {
		t.Helper()
		served := map[string]int{}
		for i := range 20 {
			code, raw := send([]*testApp{a, b}[i%2])
			var res struct {
				NodeID string `json:"node_id"`
			}
			if code != http.StatusOK || json.Unmarshal(raw, &res) != nil || res.NodeID == "" {
				t.Fatalf("turn %d: %d %s", i, code, raw)
			}
			served[res.NodeID]++
		}
		return served
	}
	sticky := func(t *testing.T, served map[string]int) {
		t.Helper()
		for _, n := range served {
			if n >= 19 {
				return
			}
		}
		t.Errorf("20 turns of one session went to %v, want one node at least 19 times", served)
	}

	header := func(apiKey, session string) func(ta *testApp) (int, []byte) {
		return func(ta *testApp) (int, []byte) {
			req, _ := http.NewRequest("POST", ta.url+"/api/v1/request", strings.NewReader(`{"task_type":"chat","content":"turn"}`))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-Id", session)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var raw json.RawMessage
			_ = json.NewDecoder(resp.Body).Decode(&raw)
			return resp.StatusCode, raw
		}
	}
	sticky(t, turns(t, header(key, "conversation-1")))

	// The OpenAI route: the session in the body's user field; the task's
	// record names its node.
	chat := func(ta *testApp) (int, []byte) {
		code, raw, _, err := ta.do("POST", "/v1/chat/completions", key, map[string]any{"model": "gemmanet/chat", "messages": userMsg("turn"), "user": "conversation-2"})
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(raw, &r)
		// The record names the node.
		if err := a.writer.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := b.writer.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		rec, err := a.store.Task(t.Context(), r.ID[len("chatcmpl-"):])
		if err != nil || len(rec.NodeIDs) != 1 {
			t.Fatalf("the record of %s: %+v, %v", r.ID, rec, err)
		}
		out, _ := json.Marshal(map[string]string{"node_id": rec.NodeIDs[0]})
		return code, out
	}
	sticky(t, turns(t, chat))

	affinity := func(result string) float64 {
		return counterValue(t, a, "switchyard_tasks_affinity_total", map[string]string{"result": result}) +
			counterValue(t, b, "switchyard_tasks_affinity_total", map[string]string{"result": result})
	}
	if hits, news := affinity("hit"), affinity("new"); hits < 36 || news != 2 {
		t.Errorf("affinity counted %v hits and %v new sessions (%v misses, %v errors; owners refused %v+%v assigns), want at least 36 of the 38 later turns, and 2",
			hits, news, affinity("miss"), affinity("error"), counterValue(t, a, "switchyard_tasks_refusals_total", nil), counterValue(t, b, "switchyard_tasks_refusals_total", nil))
	}
	// Another account's session of the same id is a session of its own:
	// its first turn is new.
	if code, raw := header(other, "conversation-1")(b); code != http.StatusOK {
		t.Fatalf("the other account's turn: %d %s", code, raw)
	}
	if news := affinity("new"); news != 3 {
		t.Errorf("%v new sessions after another account's first turn, want 3", news)
	}
}

// X-Session-Id is bounded: over 128 characters (a 60 KiB one, under the
// 64 KiB header cap, included), or with anything but printable ASCII, it
// is 422 invalid_request naming the header, on /api/v1/request and the
// OpenAI routes alike; 128 printable characters are a session.
func TestSessionIDBounded(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "n", Capabilities: []string{"chat"}, MaxConcurrency: 4,
		Handler: sdk.HandlerFunc(func(context.Context, *sdk.Task, func(string) error) (sdk.Result, error) {
			return sdk.Result{Text: "ok"}, nil
		})}).WaitRegistered(t, 5*time.Second)
	send := func(path, body, session string) (int, string) {
		req, _ := http.NewRequest("POST", ta.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-Id", session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	routes := map[string]string{
		"/api/v1/request":      `{"task_type":"chat","content":"turn"}`,
		"/v1/chat/completions": `{"model":"gemmanet/chat","messages":[{"role":"user","content":"turn"}]}`,
	}
	printable := strings.Repeat("a-Z_0.9 ~", 15)[:128]
	for path, body := range routes {
		for _, bad := range []string{strings.Repeat("s", 60<<10), printable + "x", "tab\there", "naïve"} {
			code, raw := send(path, body, bad)
			if code != http.StatusUnprocessableEntity || !strings.Contains(raw, "invalid_request") || !strings.Contains(raw, "X-Session-Id") {
				t.Errorf("%s with a %d-byte X-Session-Id %.20q: %d %.300s, want 422 invalid_request naming X-Session-Id", path, len(bad), bad, code, raw)
			}
		}
		news := counterValue(t, ta, "switchyard_tasks_affinity_total", map[string]string{"result": "new"})
		if code, raw := send(path, body, printable[:127]+path[1:2]); code != http.StatusOK {
			t.Fatalf("%s with a 128-character X-Session-Id: %d %s", path, code, raw)
		}
		if got := counterValue(t, ta, "switchyard_tasks_affinity_total", map[string]string{"result": "new"}); got != news+1 {
			t.Errorf("the 128-character session counted %v new sessions, want 1", got-news)
		}
	}
}
