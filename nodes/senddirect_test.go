package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// SendDirect with a context that has ended writes nothing from the
// caller's goroutine: the message is queued for the writer, reaches the
// node, and the session stays open.
func TestSendDirectAfterItsContextEndedQueues(t *testing.T) {
	h := serveHub(t, Config{PingInterval: time.Hour})
	p := dialRaw(t, h.url)
	p.register(t, "late")
	s := h.Session(NodeID("acct", "late"))
	if s == nil {
		t.Fatal("no session for the registered node")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !s.SendDirect(ctx, []byte(`{"msg_type":"x"}`)) {
		t.Fatal("SendDirect refused a message for an open session")
	}
	if op, payload := p.readFrame(t, 5*time.Second); op != opText || string(payload) != `{"msg_type":"x"}` {
		t.Fatalf("got %#x %q, want the message", op, payload)
	}
	if s.isClosing() {
		t.Fatal("the session closed")
	}
}

// A request that ends while SendDirect is writing on its goroutine does
// not cut the write: the library closes a connection whose write's
// context ends, and a client going away must not cost the node its
// connection (and the node's other tasks). The peer reads the frame's
// first bytes, so the write is under way, far from done (64 MiB against
// loopback's socket buffers), when the request's context is cancelled;
// then it reads the rest, whole, and the session is still open.
func TestSendDirectOutlivesItsRequest(t *testing.T) {
	h := serveHub(t, Config{PingInterval: time.Hour})
	p := dialRaw(t, h.url)
	p.register(t, "slow")
	s := h.Session(NodeID("acct", "slow"))
	if s == nil {
		t.Fatal("no session for the registered node")
	}
	big := bytes.Repeat([]byte("x"), 64<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan bool, 1)
	go func() { done <- s.SendDirect(ctx, big) }()
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := p.br.Peek(2); err != nil {
		t.Fatalf("the write did not begin: %v", err)
	}
	cancel()
	if op, payload := p.readFrame(t, 20*time.Second); op != opText || len(payload) != len(big) {
		t.Fatalf("got %#x with %d bytes, want the whole %d-byte message", op, len(payload), len(big))
	}
	if !<-done {
		t.Fatal("SendDirect refused a message for an open session")
	}
	if s.isClosing() {
		t.Fatal("the request's end closed the node's session")
	}
	if !s.SendDirect(context.Background(), []byte(`{"msg_type":"x"}`)) {
		t.Fatal("the session refused the next message")
	}
	if op, payload := p.readFrame(t, 5*time.Second); op != opText || string(payload) != `{"msg_type":"x"}` {
		t.Fatalf("got %#x %q, want the next message", op, payload)
	}
}

// To a node that stops reading, the write SendDirect does on its caller's
// goroutine ends at WriteTimeout, as the writer's writes do, and the
// session closes (the frame may be half sent). The caller's context never
// ends here: WriteTimeout alone bounds the wait.
func TestSendDirectWriteBoundedByWriteTimeout(t *testing.T) {
	h := serveHub(t, Config{PingInterval: time.Hour, WriteTimeout: 200 * time.Millisecond})
	p := dialRaw(t, h.url)
	p.register(t, "stalled")
	s := h.Session(NodeID("acct", "stalled"))
	if s == nil {
		t.Fatal("no session for the registered node")
	}
	big := bytes.Repeat([]byte("x"), 64<<20) // far more than loopback's socket buffers; the peer reads nothing
	done := make(chan bool, 1)
	go func() { done <- s.SendDirect(context.Background(), big) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("SendDirect still writing 20s after its WriteTimeout")
	}
	if !s.isClosing() {
		t.Error("a write cut short by WriteTimeout left the session open")
	}
}

// When the context a node's socket is served with ends (the server
// stopping without a drain), the session ends with it, though the node is
// silent: its read (watched once for the session's life, not per read)
// and its writer both stop.
func TestServeContextEndClosesSession(t *testing.T) {
	h := serveHub(t, Config{PingInterval: time.Hour})
	p := dialRaw(t, h.url)
	p.register(t, "quiet")
	s := h.Session(NodeID("acct", "quiet"))
	if s == nil {
		t.Fatal("no session for the registered node")
	}
	h.stop()
	select {
	case <-s.writerDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the session outlived its serving context by 10s")
	}
	if h.Session(NodeID("acct", "quiet")) != nil {
		t.Error("the closed session is still attached")
	}
}

// node_registered is the first message a node receives, even when a task
// is sent to it the moment it is routable: the hub's Announce hook runs
// once the session is attached (a request may find it) and before
// node_registered is written, and an assign sent there with SendDirect,
// whose socket looks free, must wait for node_registered rather than be
// written ahead of it.
func TestNodeRegisteredBeforeAnyTask(t *testing.T) {
	assign := wire.MustEncode(wire.MsgTaskAssign, map[string]string{"task_id": "t1"})
	sent := make(chan bool, 1)
	h := serveHub(t, Config{PingInterval: time.Hour, Announce: func(ctx context.Context, s *Session) {
		// A request's goroutine, waited for: its SendDirect is over
		// before Serve goes on to write node_registered.
		done := make(chan bool)
		go func() { done <- s.SendDirect(context.Background(), assign) }()
		sent <- <-done
	}})
	p := dialRaw(t, h.url)
	reg, _ := json.Marshal(map[string]any{"msg_type": wire.MsgNodeRegister, "payload": map[string]any{
		"api_key": "k", "name": "first", "capabilities": []string{"echo"}}})
	p.writeFrame(t, opText, reg)
	if op, payload := p.readFrame(t, 5*time.Second); op != opText || !strings.Contains(string(payload), string(wire.MsgNodeRegistered)) {
		t.Fatalf("first frame %#x %q, want node_registered", op, payload)
	}
	if !<-sent {
		t.Fatal("SendDirect refused the assign")
	}
	if op, payload := p.readFrame(t, 5*time.Second); op != opText || string(payload) != string(assign) {
		t.Fatalf("second frame %#x %q, want the assign", op, payload)
	}
}
