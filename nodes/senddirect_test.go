package nodes

import (
	"bytes"
	"context"
	"testing"
	"time"
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
