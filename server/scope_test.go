package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
)

// Scoped keys: a node-only key cannot send requests; a client-only key
// cannot connect a node; a key limited to task types may ask for, and serve,
// only those — on the GemmaNet routes, the OpenAI routes (an alias passes
// over a type the key may not ask for) and node registration.
func TestScopedKeys(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.ModelAliases = map[string][]string{"either": {"echo", "chat"}} })
	ctx := context.Background()
	acct, nodeKey, err := ta.store.CreateAccount(ctx, "scoped", "", "")
	if err != nil {
		t.Fatal(err)
	}
	newKey := func(l store.KeyLimits) string {
		k, key, err := ta.store.CreateKey(ctx, acct.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ta.store.SetKeyLimits(ctx, k.ID, l); err != nil {
			t.Fatal(err)
		}
		return key
	}
	owner, _ := ta.store.Authenticate(ctx, nodeKey)
	if _, err := ta.store.SetKeyLimits(ctx, owner.KeyID, store.KeyLimits{Use: store.KeyUseNode, TaskTypes: []string{"chat", "echo"}}); err != nil {
		t.Fatal(err)
	}
	clientKey := newKey(store.KeyLimits{Use: store.KeyUseClient})
	chatOnly := newKey(store.KeyLimits{TaskTypes: []string{"chat"}})

	n := connectNode(t, ta.wsURL, reg(nodeKey, "n1", "echo", "chat"))

	// A node-only key sends no request.
	scope := func(what string, code int, raw []byte) {
		t.Helper()
		if code != http.StatusForbidden || !strings.Contains(string(raw), `"key_scope"`) {
			t.Errorf("%s: %d %s, want 403 key_scope", what, code, raw)
		}
	}
	code, raw, _, _ := ta.do("POST", "/api/v1/request", nodeKey, map[string]any{"task_type": "echo", "content": "x"})
	scope("a node key's request", code, raw)
	code, raw, _, _ = ta.do("POST", "/v1/chat/completions", nodeKey, map[string]any{"model": "gemmanet/echo", "messages": userMsg("x")})
	scope("a node key's chat completion", code, raw)

	// A client-only key connects no node: 4001, saying why.
	refused := nodetest.Start(t, ta.wsURL, reg(clientKey, "n2", "echo"))
	if m := refused.Recv(5 * time.Second); m.MsgType != "error" || !strings.Contains(m.Payload["message"].(string), "clients only") {
		t.Errorf("a client key's node got %s %v, want an error saying the key is for clients only", m.MsgType, m.Payload)
	}
	if code := refused.WaitClosed(5 * time.Second); code != wire.CloseAuthFailed {
		t.Errorf("a client key's node closed with %d, want 4001", code)
	}
	// ... but sends requests.
	ch := ta.requestAsync(clientKey, map[string]any{"task_type": "echo", "content": "x"})
	m := nextTask(t, n)
	n.Result(m.TaskID(), "completed", "x")
	if r := waitFor(t, ch, 5*time.Second); r.code != http.StatusOK {
		t.Errorf("a client key's request: %d %s", r.code, r.body)
	}

	// A key limited to chat: echo is refused, chat served, and an alias
	// of echo then chat goes to chat.
	code, raw, _, _ = ta.do("POST", "/api/v1/request", chatOnly, map[string]any{"task_type": "echo", "content": "x"})
	scope("echo with a chat-only key", code, raw)
	code, raw, _, _ = ta.do("POST", "/api/v1/tasks", chatOnly, map[string]any{"task_type": "echo", "content": "x"})
	scope("an async echo with a chat-only key", code, raw)
	code, raw, _, _ = ta.do("POST", "/v1/embeddings", chatOnly, map[string]any{"model": "gemmanet/echo", "input": "x"})
	scope("an embedding of echo with a chat-only key", code, raw)
	for _, model := range []string{"gemmanet/chat", "either"} {
		ch := async(func() reply {
			code, b, _, err := ta.do(http.MethodPost, "/v1/chat/completions", chatOnly, map[string]any{"model": model, "messages": userMsg("x")})
			return reply{code, b, err}
		})
		m := nextTask(t, n)
		if m.Payload["task_type"] != "chat" {
			t.Errorf("model %s with a chat-only key: a task of type %v", model, m.Payload["task_type"])
		}
		n.Result(m.TaskID(), "completed", "x")
		if r := waitFor(t, ch, 5*time.Second); r.code != http.StatusOK {
			t.Errorf("model %s with a chat-only key: %d %s", model, r.code, r.body)
		}
	}

	// A node whose key may serve chat and echo cannot declare more.
	wide := nodetest.Start(t, ta.wsURL, reg(nodeKey, "n3", "chat", "translate"))
	if m := wide.Recv(5 * time.Second); m.MsgType != "error" || !strings.Contains(m.Payload["message"].(string), `"translate"`) {
		t.Errorf("a node beyond its key's task types got %s %v, want an error naming translate", m.MsgType, m.Payload)
	}
	if code := wide.WaitClosed(5 * time.Second); code != wire.ClosePolicy {
		t.Errorf("a node beyond its key's task types closed with %d, want 1008", code)
	}
}
