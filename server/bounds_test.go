package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/boundtest"
	"github.com/switchyard-dev/switchyard/store"
)

// Every decoder of an HTTP body, fed the worst JSON of about 1 MB in each
// of its fields and in a field it does not know: refused or read within
// boundtest's bounds, in stack and in bytes allocated per byte of input
// (invariant 16).
func TestBodyDecodersAreBounded(t *testing.T) {
	decoders := []struct {
		name   string
		fields []string // where a hostile value goes, "%s" in the body
		read   func([]byte)
	}{
		{"task body", []string{
			`{"task_type":"echo","content":"a","x":%s}`,
			`{"task_type":"echo","content":%s}`,
			`{"task_type":%s,"content":"a"}`,
			`{"task_type":"echo","content":"a","params":%s}`,
			`{"task_type":"echo","content":"a","params":{"p":%s}}`,
			`{"task_type":"echo","content":"a","node_labels":%s}`,
			`{"task_type":"echo","content":"a","api_key":%s}`,
		}, func(b []byte) { _, _ = parseTaskBody(b) }},
		{"async extras", []string{
			`{"webhook_url":%s}`, `{"ttl":%s}`, `{"x":%s}`,
		}, func(b []byte) { _, _ = parseAsyncExtras(b) }},
		{"chat body", []string{
			`{"model":"m","messages":[{"role":"user","content":"a"}],"x":%s}`,
			`{"model":%s,"messages":[{"role":"user","content":"a"}]}`,
			`{"model":"m","messages":%s}`,
			`{"model":"m","messages":[{"role":"user","content":%s}]}`,
			`{"model":"m","messages":[{"role":%s,"content":"a"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":%s}`,
			`{"model":"m","messages":[{"role":"user","content":"a"}],"stream_options":%s}`,
			`{"model":"m","messages":[{"role":"user","content":"a"}],"user":%s}`,
			`{"model":"m","messages":[{"role":"user","content":"a"}],"tools":%s}`,
			`{"model":"m","messages":[{"role":"user","content":"a","tool_calls":%s}]}`,
			`{"model":"m","messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema","json_schema":{"schema":%s}}}`,
		}, func(b []byte) { _, _ = parseChatBody(b) }},
		{"completions body", []string{
			`{"model":"m","prompt":"a","x":%s}`,
			`{"model":"m","prompt":%s}`,
			`{"model":%s,"prompt":"a"}`,
			`{"model":"m","prompt":"a","temperature":%s}`,
		}, func(b []byte) { _, _ = parseTextBody(b) }},
		{"embeddings body", []string{
			`{"model":"m","input":"a","x":%s}`,
			`{"model":"m","input":%s}`,
			`{"model":"m","input":"a","encoding_format":%s}`,
		}, func(b []byte) { _, _ = parseEmbedBody(b) }},
		// POST /api/v1/rate and /api/v1/register. (PUT /admin/api/keys/…
		// /limits reads a list of task types, but only the operator's
		// token reaches it.)
		{"rate, register", []string{`{"task_id":%s,"rating":1}`, `{"task_id":"t","rating":%s}`, `{"email":%s}`},
			func(b []byte) {
				var v struct {
					TaskID *string `json:"task_id"`
					Rating *int    `json:"rating"`
					Email  *string `json:"email"`
				}
				_ = decodeObject(b, &v)
			}},
	}
	// A hostile value in each of a chat's 500 messages: what one costs,
	// 500 times over.
	for _, s := range boundtest.Shapes(2000) {
		msg := `{"role":"user","content":` + s.JSON + `}`
		in := []byte(`{"model":"m","messages":[` + strings.Repeat(msg+",", maxChatMessages-1) + msg + `]}`)
		boundtest.Check(t, "chat body, 500 messages of "+s.Name, in, func(b []byte) { _, _ = parseChatBody(b) })
	}
	for _, d := range decoders {
		for _, field := range d.fields {
			for _, s := range slices.Concat(boundtest.Shapes(1<<20), boundtest.Shapes(19_000)) {
				in := []byte(strings.Replace(field, "%s", s.JSON, 1))
				c := boundtest.Check(t, d.name+" "+field+" "+s.Name, in, d.read)
				if testing.Verbose() {
					t.Logf("%-18s %-70.70s %-22s %5.2f B/B stack %d", d.name, field, s.Name, float64(c.Alloc)/float64(len(in)), c.Stack)
				}
			}
		}
	}
}

// Invariant 16: a request's key is checked before its body is read. Each
// route that reads a JSON body is sent headers announcing 2 MB with a wrong
// key, or a key of the wrong kind, and no body at all: the refusal comes
// at once. (Before, /api/v1/request and /api/v1/tasks read the body first,
// so the refusal waited for bytes that never came, until the body
// deadline.)
func TestKeyIsCheckedBeforeTheBody(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.OpenRegistration = false })
	ctx := context.Background()
	acct, _, err := ta.store.CreateAccount(ctx, "owner", "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, nodeKey := ta.keyWith(t, acct.ID, store.KeyLimits{Use: store.KeyUseNode})
	addr := strings.TrimPrefix(ta.url, "http://")
	for _, path := range []string{"/api/v1/request", "/api/v1/tasks", "/api/v1/rate", "/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
		for _, who := range []struct {
			name, key string
			status    int
		}{{"a wrong key", "gn_0123456789abcdef0123456789abcdef", http.StatusUnauthorized}, {"a node key", nodeKey, http.StatusForbidden}} {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second)) // the body deadline is 30 s
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1999999\r\n\r\n", path, who.key)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Errorf("%s to %s, its body not sent: no answer (%v); the key must be refused before the body is read", who.name, path, err)
			} else if resp.StatusCode != who.status {
				t.Errorf("%s to %s, its body not sent: %d, want %d", who.name, path, resp.StatusCode, who.status)
			}
			_ = conn.Close()
		}
	}
}
