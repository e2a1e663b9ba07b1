// Package nodetest is a node written against the wire protocol alone: a
// raw WebSocket client that tests drive message by message. It shares no
// code with the server or the SDK, so it checks the protocol as documented.
package nodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Msg is a message as a node sees it.
type Msg struct {
	MsgID     string         `json:"msg_id"`
	MsgType   string         `json:"msg_type"`
	Payload   map[string]any `json:"payload"`
	SenderID  string         `json:"sender_id"`
	Timestamp string         `json:"timestamp"`
}

// Node is one raw connection.
type Node struct {
	t      testing.TB
	Conn   *websocket.Conn
	ID     string        // from node_registered
	Msgs   chan Msg      // every message the server sent, in order
	Closed chan struct{} // closed when the connection ends
	err    error         // why it ended; read after Closed
}

// Dial opens a socket without registering. It is closed when the test ends.
func Dial(t testing.TB, url string) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, nil)
	if err == nil {
		c.SetReadLimit(16 << 20)
		t.Cleanup(func() { _ = c.CloseNow() })
	}
	return c, resp, err
}

// Reg is a node_register payload.
func Reg(key, name string, caps ...string) map[string]any {
	return map[string]any{"api_key": key, "name": name, "capabilities": caps}
}

// WithCancel declares in reg that the node understands task_cancel
// (node_register's "features"); a node that does not declare it is never
// sent one, as GemmaNet's SDK is not.
func WithCancel(reg map[string]any) map[string]any {
	reg["features"] = []string{"task_cancel"}
	return reg
}

// Connect registers a node and fails the test unless node_registered is
// its first message.
func Connect(t testing.TB, url string, reg map[string]any) *Node {
	t.Helper()
	n := Start(t, url, reg)
	m := n.Recv(5 * time.Second)
	if m.MsgType != "node_registered" {
		t.Fatalf("first message is %s %v, want node_registered", m.MsgType, m.Payload)
	}
	n.ID, _ = m.Payload["node_id"].(string)
	return n
}

// Start sends node_register and returns before any answer.
func Start(t testing.TB, url string, reg map[string]any) *Node {
	t.Helper()
	conn, _, err := Dial(t, url)
	if err != nil {
		t.Fatal(err)
	}
	n := Wrap(t, conn)
	n.Send("node_register", reg)
	return n
}

// Wrap starts reading an open connection.
func Wrap(t testing.TB, conn *websocket.Conn) *Node {
	n := &Node{t: t, Conn: conn, Msgs: make(chan Msg, 4096), Closed: make(chan struct{})}
	go n.readLoop()
	t.Cleanup(func() {
		_ = conn.CloseNow()
		<-n.Closed
	})
	return n
}

func (n *Node) readLoop() {
	defer close(n.Closed)
	for {
		_, b, err := n.Conn.Read(context.Background())
		if err != nil {
			n.err = err
			return
		}
		var m Msg
		if err := json.Unmarshal(b, &m); err != nil {
			n.err = fmt.Errorf("server sent non-JSON %q: %w", b, err)
			return
		}
		n.Msgs <- m
	}
}

// Send sends one message; safe from any goroutine (errors are returned,
// not fatal, so a closing connection does not fail a background sender).
func (n *Node) Send(msgType string, payload any) error {
	b, err := json.Marshal(map[string]any{
		"msg_id": "m", "msg_type": msgType, "payload": payload, "sender_id": "",
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano),
	})
	if err != nil {
		return err
	}
	return n.SendRaw(b)
}

// SendRaw sends bytes as one text frame.
func (n *Node) SendRaw(b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.Conn.Write(ctx, websocket.MessageText, b)
}

// MustSend sends and fails the test on error; call it from the test goroutine.
func (n *Node) MustSend(msgType string, payload any) {
	n.t.Helper()
	if err := n.Send(msgType, payload); err != nil {
		n.t.Fatalf("node write %s: %v", msgType, err)
	}
}

// Recv returns the next message, failing the test after d.
func (n *Node) Recv(d time.Duration) Msg {
	n.t.Helper()
	select {
	case m := <-n.Msgs:
		return m
	case <-n.Closed:
		select {
		case m := <-n.Msgs:
			return m
		default:
		}
		n.t.Fatalf("connection closed while waiting for a message: %v", n.err)
	case <-time.After(d):
		n.t.Fatalf("no message within %s", d)
	}
	return Msg{}
}

// Expect returns the next message and fails unless it is of type typ.
func (n *Node) Expect(typ string) Msg {
	n.t.Helper()
	m := n.Recv(5 * time.Second)
	if m.MsgType != typ {
		n.t.Fatalf("got %s %v, want %s", m.MsgType, m.Payload, typ)
	}
	return m
}

// TaskID is the task_id of a task message.
func (m Msg) TaskID() string {
	s, _ := m.Payload["task_id"].(string)
	return s
}

// WaitClosed waits for the connection to end and returns its close code.
func (n *Node) WaitClosed(d time.Duration) websocket.StatusCode {
	n.t.Helper()
	select {
	case <-n.Closed:
		return websocket.CloseStatus(n.err)
	case <-time.After(d):
		n.t.Fatalf("connection still open after %s", d)
	}
	return 0
}

// Result answers a task.
func (n *Node) Result(taskID, status, text string) {
	n.t.Helper()
	n.MustSend("task_result", map[string]any{"task_id": taskID, "node_id": n.ID, "status": status,
		"result": text, "processing_time_ms": 1, "usage": nil})
}

// Chunk streams one delta.
func (n *Node) Chunk(taskID, delta string) {
	n.t.Helper()
	n.MustSend("task_chunk", map[string]any{"task_id": taskID, "delta": delta})
}
