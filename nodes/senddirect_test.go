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

// The write SendDirect does in its caller's goroutine is bounded by the
// caller's context, not only by WriteTimeout (an hour here): to a node
// that stops reading, a write too large for the socket's buffers returns
// when the context ends, and the session closes (the frame may be half
// sent).
func TestSendDirectWriteBoundedByContext(t *testing.T) {
	h := serveHub(t, Config{PingInterval: time.Hour, WriteTimeout: time.Hour})
	p := dialRaw(t, h.url)
	p.register(t, "stalled")
	s := h.Session(NodeID("acct", "stalled"))
	if s == nil {
		t.Fatal("no session for the registered node")
	}
	big := bytes.Repeat([]byte("x"), 64<<20) // far more than loopback's socket buffers; the peer reads nothing
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan bool, 1)
	go func() { done <- s.SendDirect(ctx, big) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("SendDirect still writing 20s after its context ended")
	}
	if !s.isClosing() {
		t.Error("a write cut short by its context left the session open")
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
