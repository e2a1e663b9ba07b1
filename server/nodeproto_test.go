package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/nodes"
)

// A node written against the wire spec alone registers and serves a plain
// and a streaming task.
func TestWireNodeServesPlainAndStreaming(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, map[string]any{
		"api_key": key, "name": "raw", "capabilities": []string{"echo"},
		"languages": []string{"en"}, "model_info": map[string]any{"model": "x"},
	})

	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "hello", "params": map[string]any{"temperature": 0.5, "style": map[string]any{"loud": true}}})
	m := n.Expect("task_assign")
	p := m.Payload
	if p["task_type"] != "echo" || p["content"] != "hello" || p["stream"] != false || p["task_id"] == "" {
		t.Fatalf("task_assign payload %v", p)
	}
	// Params reach the handler as they were sent.
	params := p["params"].(map[string]any)
	if params["temperature"] != 0.5 || params["style"].(map[string]any)["loud"] != true {
		t.Fatalf("params %v", params)
	}
	n.MustSend("task_result", map[string]any{"task_id": p["task_id"], "node_id": n.ID, "status": "completed",
		"result": "HELLO", "processing_time_ms": 7, "usage": map[string]any{"prompt_tokens": 2, "completion_tokens": 3}})
	var res result
	r := waitFor(t, ch, 5*time.Second)
	r.decode(t, &res)
	if r.code != 200 || res.Status != "completed" || res.Result != "HELLO" || res.NodeID != n.ID || res.TaskID != p["task_id"] ||
		res.ProcessingTimeMs != 7 || res.Usage == nil || res.Usage.TotalTokens != 5 {
		t.Fatalf("answer %d %+v", r.code, res)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, code := ta.stream(t, ctx, key, map[string]any{"task_type": "echo", "content": "abc"})
	m = n.Expect("task_assign")
	if code != 200 || m.Payload["stream"] != true {
		t.Fatalf("stream: HTTP %d, assign %v", code, m.Payload)
	}
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	id := m.Payload["task_id"]
	for _, d := range []string{"a", "b", "c"} {
		n.MustSend("task_chunk", map[string]any{"task_id": id, "delta": d})
		// Incremental: each piece arrives before the node sends the next.
		if ev := s.next(t); ev["delta"] != d {
			t.Fatalf("event %v, want delta %q", ev, d)
		}
	}
	n.Result(id.(string), "completed", "abc")
	ev := s.next(t)
	if ev["done"] != true || ev["result"].(map[string]any)["result"] != "abc" || ev["result"].(map[string]any)["status"] != "completed" {
		t.Fatalf("done event %v", ev)
	}
	s.expectEOF(t)
}

func TestNodeIDIsStableAndPerAccount(t *testing.T) {
	ta := startApp(t, nil)
	alice, bob := ta.account(t, "alice", ""), ta.account(t, "bob", "")
	a1 := connectNode(t, ta.wsURL, reg(alice, "w1", "echo"))
	b1 := connectNode(t, ta.wsURL, reg(bob, "w1", "echo"))
	a2 := connectNode(t, ta.wsURL, reg(alice, "w2", "echo"))
	acct, err := ta.store.AccountByName(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if a1.ID != nodes.NodeID(acct.ID, "w1") || a1.ID == b1.ID || a1.ID == a2.ID {
		t.Fatalf("ids: alice/w1 %s, bob/w1 %s, alice/w2 %s", a1.ID, b1.ID, a2.ID)
	}
	// Same key and name again → same id, and the old connection is replaced.
	again := connectNode(t, ta.wsURL, reg(alice, "w1", "echo"))
	if again.ID != a1.ID {
		t.Fatalf("reconnect got id %s, want %s", again.ID, a1.ID)
	}
	if code := a1.WaitClosed(2 * time.Second); code != 4000 {
		t.Fatalf("replaced connection closed with %d, want 4000", code)
	}
	var list []map[string]any
	ta.call(t, "GET", "/api/v1/nodes", "", nil, &list)
	count := 0
	for _, n := range list {
		if n["node_id"] == a1.ID {
			count++
		}
	}
	if len(list) != 3 || count != 1 {
		t.Fatalf("nodes listed: %v (want 3, alice/w1 once)", list)
	}
}

// Duplicate identity: the old connection's in-flight task fails at once
// (502), not when its close handshake ends, and the new one serves.
func TestReplacedConnectionFailsItsTasksAtOnce(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	old := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	old.Expect("task_assign")
	start := time.Now()
	fresh := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	r := waitFor(t, ch, 3*time.Second)
	var e apiErr
	r.decode(t, &e)
	if r.code != 502 || e.Error.Code != "node_disconnected" || time.Since(start) > time.Second {
		t.Fatalf("HTTP %d %+v after %s", r.code, e, time.Since(start))
	}
	if code := old.WaitClosed(2 * time.Second); code != 4000 {
		t.Fatalf("close code %d", code)
	}
	ch = ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "y"})
	m := fresh.Expect("task_assign")
	fresh.Result(m.Payload["task_id"].(string), "completed", "y")
	if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
		t.Fatalf("new connection does not serve: %d %s", r.code, r.body)
	}
}

func TestHandshakeErrors(t *testing.T) {
	ta := startApp(t, nil)
	cases := []struct {
		name  string
		first string
		code  string
		close websocket.StatusCode
	}{
		{"not register first", `{"msg_type":"heartbeat","payload":{}}`, "invalid_registration", 1008},
		{"not json", `hello`, "invalid_registration", 1008},
		{"bad capability", `{"msg_type":"node_register","payload":{"api_key":"x","name":"n","capabilities":["bad cap"]}}`, "invalid_registration", 1008},
		{"unknown key", `{"msg_type":"node_register","payload":{"api_key":"gn_nope","name":"n","capabilities":["echo"]}}`, "auth_failed", 4001},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, _, err := nodetest.Dial(t, ta.wsURL)
			if err != nil {
				t.Fatal(err)
			}
			n := nodetest.Wrap(t, conn)
			if err := n.SendRaw([]byte(c.first)); err != nil {
				t.Fatal(err)
			}
			m := n.Expect("error")
			if m.Payload["code"] != c.code || m.Payload["message"] == "" {
				t.Fatalf("error %v, want code %s", m.Payload, c.code)
			}
			if got := n.WaitClosed(3 * time.Second); got != c.close {
				t.Fatalf("closed with %d, want %d", got, c.close)
			}
		})
	}
}

func TestRegistrationTimeout(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.RegisterTimeout = 200 * time.Millisecond })
	conn, _, err := nodetest.Dial(t, ta.wsURL)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = conn.Read(context.Background())
	if code := websocket.CloseStatus(err); code != 1008 || time.Since(start) > 3*time.Second {
		t.Fatalf("silent node closed with %d after %s; want 1008 after the register timeout", code, time.Since(start))
	}
}

// The per-account cap holds under concurrent registrations of distinct nodes.
func TestNodeCapUnderConcurrentRegistrations(t *testing.T) {
	ta := startApp(t, nil) // cap 5
	key := ta.account(t, "alice", "")
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every connection stays open until the test ends, so none frees
			// its place under the cap early.
			conn, _, err := nodetest.Dial(t, ta.wsURL)
			if err != nil {
				t.Error(err)
				return
			}
			msg := fmt.Sprintf(`{"msg_type":"node_register","payload":{"api_key":%q,"name":"w%d","capabilities":["echo"]}}`, key, i)
			if err := conn.Write(context.Background(), websocket.MessageText, []byte(msg)); err != nil {
				t.Error(err)
				return
			}
			_, b, err := conn.Read(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			kind := "registered"
			if strings.Contains(string(b), `"too_many_nodes"`) {
				kind = "too_many_nodes"
				if _, _, err := conn.Read(context.Background()); websocket.CloseStatus(err) != 1008 {
					t.Errorf("refused node closed with %v, want 1008", err)
				}
			}
			mu.Lock()
			outcomes[kind]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if outcomes["registered"] != 5 || outcomes["too_many_nodes"] != 1 {
		t.Fatalf("outcomes %v; want 5 registered, 1 too_many_nodes", outcomes)
	}
}

func TestOversizedMessageCloses1009AndOthersAreUnaffected(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.MaxMessageBytes = 64 << 10; c.ResultMaxBytes = 32 << 10 })
	key := ta.account(t, "alice", "")
	bad := connectNode(t, ta.wsURL, reg(key, "bad", "other"))
	good := connectNode(t, ta.wsURL, reg(key, "good", "echo"))
	big := `{"msg_type":"heartbeat","payload":{"pad":"` + strings.Repeat("x", 70<<10) + `"}}`
	if err := bad.SendRaw([]byte(big)); err != nil {
		t.Fatal(err)
	}
	if code := bad.WaitClosed(3 * time.Second); code != 1009 {
		t.Fatalf("oversized message closed with %d, want 1009", code)
	}
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "still here"})
	m := good.Expect("task_assign")
	good.Result(m.Payload["task_id"].(string), "completed", "ok")
	if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
		t.Fatalf("other node affected: %d %s", r.code, r.body)
	}
}

// Malformed and out-of-order messages after the handshake get an error
// message; the connection and its tasks go on.
func TestBadMessagesAfterHandshake(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	for raw, code := range map[string]string{
		`{{{`: "invalid_message",
		`{"msg_type":"node_register","payload":{"api_key":"x","name":"y","capabilities":["z"]}}`: "unexpected_message",
		`{"msg_type":"what_is_this"}`:                           "unexpected_message",
		`{"msg_type":"task_chunk","payload":{"delta":"no id"}}`: "invalid_message",
		`{"msg_type":"task_chunk","payload":[1,2]}`:             "invalid_message",
	} {
		if err := n.SendRaw([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		if m := n.Expect("error"); m.Payload["code"] != code {
			t.Fatalf("%s: error %v, want %s", raw, m.Payload, code)
		}
	}
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	m := n.Expect("task_assign")
	n.Result(m.Payload["task_id"].(string), "completed", "x")
	if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
		t.Fatalf("node unusable after bad messages: %d %s", r.code, r.body)
	}
}

func TestBinaryFrameCloses1003(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	if err := n.Conn.Write(context.Background(), websocket.MessageBinary, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if code := n.WaitClosed(3 * time.Second); code != 1003 {
		t.Fatalf("binary frame closed with %d, want 1003", code)
	}
}

// An unreadable task_result fails its task at once instead of leaving the
// client to time out.
func TestUnreadableResultFailsTheTask(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	m := n.Expect("task_assign")
	n.MustSend("task_result", map[string]any{"task_id": m.Payload["task_id"], "status": "completed", "result": []int{1}})
	if e := n.Expect("error"); e.Payload["code"] != "invalid_message" {
		t.Fatalf("error %v", e.Payload)
	}
	var res result
	r := waitFor(t, ch, 3*time.Second)
	r.decode(t, &res)
	if r.code != 200 || res.Status != "failed" || !strings.Contains(res.Result, "invalid task_result") {
		t.Fatalf("HTTP %d %+v", r.code, res)
	}
}

func TestHandshakeRateLimit(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.HandshakeRate = 2 })
	for i := 0; i < 2; i++ {
		if _, _, err := nodetest.Dial(t, ta.wsURL); err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
	}
	_, resp, err := nodetest.Dial(t, ta.wsURL)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("third dial in a minute: %v, %v; want HTTP 403", resp, err)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("403 without Retry-After")
	}
}

func TestAccountDeletionClosesNodesWith4003(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	if code, _ := ta.call(t, "DELETE", "/api/v1/account", key, nil, nil); code != 200 {
		t.Fatalf("DELETE /api/v1/account = %d", code)
	}
	if code := n.WaitClosed(3 * time.Second); code != 4003 {
		t.Fatalf("closed with %d, want 4003", code)
	}
	if code, _ := ta.call(t, "GET", "/api/v1/account", key, nil, nil); code != 401 {
		t.Fatalf("deleted account's key still works: %d", code)
	}
}

// A node may send its first frame in the same packet as the upgrade
// request; those bytes must survive the switch to the small socket buffers.
func TestFirstFrameWithTheUpgradeRequest(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	conn, err := net.Dial("tcp", ta.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := fmt.Appendf(nil, `{"msg_type":"node_register","payload":{"api_key":%q,"name":"eager","capabilities":["echo"]}}`, key)
	frame := []byte{0x81, 0x80 | 126, byte(len(payload) >> 8), byte(len(payload)), 1, 2, 3, 4}
	for i, c := range payload {
		frame = append(frame, c^[]byte{1, 2, 3, 4}[i%4])
	}
	req := "GET /ws/node HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := conn.Write(append([]byte(req), frame...)); err != nil { // one write: one packet on loopback
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatal(err)
	}
	n := int(head[1] & 0x7f)
	if n == 126 {
		ext := make([]byte, 2)
		io.ReadFull(br, ext)
		n = int(ext[0])<<8 | int(ext[1])
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"node_registered"`) {
		t.Fatalf("first frame from the server: %s", body)
	}
}
