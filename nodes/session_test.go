package nodes

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// A ping waits for its pong, and a node that is slow to answer must not
// hold up what the session writes meanwhile: an assign is written while a
// ping is still unanswered.
func TestPingDoesNotHoldUpWrites(t *testing.T) {
	h := serveHub(t, Config{PingInterval: 20 * time.Millisecond, PingTimeout: time.Minute})
	p := dialRaw(t, h.url)
	p.register(t, "slow")
	// This peer reads the ping and leaves it unanswered, so the hub is now
	// waiting for a pong that does not come (for up to a minute).
	if op, _ := p.readFrame(t, 5*time.Second); op != opPing {
		t.Fatalf("frame %#x after node_registered, want a ping", op)
	}
	s := h.Session(NodeID("acct", "slow"))
	if s == nil {
		t.Fatal("no session for the registered node")
	}
	assign := wire.MustEncode(wire.MsgTaskAssign, map[string]string{"task_id": "t1"})
	if !s.Send(assign) {
		t.Fatal("Send refused the assign")
	}
	// Another ping may come first (not while one is out, but the writer
	// does not promise that); the assign must come within a few seconds,
	// not after the ping's minute.
	deadline := time.Now().Add(5 * time.Second)
	for {
		op, payload := p.readFrame(t, time.Until(deadline))
		if op == opPing {
			continue
		}
		if op != opText || string(payload) != string(assign) {
			t.Fatalf("got frame %#x %q, want the assign", op, payload)
		}
		break
	}
	if s.isClosing() {
		t.Fatal("the session closed while its ping was merely slow")
	}
}

// A ping left unanswered for PingTimeout closes the socket with 1011, as it
// did when the writer pinged.
func TestUnansweredPingClosesTheSocket(t *testing.T) {
	h := serveHub(t, Config{PingInterval: 20 * time.Millisecond, PingTimeout: 100 * time.Millisecond})
	p := dialRaw(t, h.url)
	p.register(t, "dead")
	if op, _ := p.readFrame(t, 5*time.Second); op != opPing {
		t.Fatalf("frame %#x after node_registered, want a ping", op)
	}
	for {
		op, payload := p.readFrame(t, 5*time.Second)
		if op == opPing {
			continue
		}
		if op != opClose || len(payload) < 2 {
			t.Fatalf("got frame %#x %q, want a close frame", op, payload)
		}
		if code := websocket.StatusCode(binary.BigEndian.Uint16(payload)); code != wire.CloseUnanswered {
			t.Fatalf("closed with %d %q, want %d", code, payload[2:], wire.CloseUnanswered)
		}
		p.writeFrame(t, opClose, payload[:2])
		return
	}
}

type testHub struct {
	*Hub
	url  string
	stop context.CancelFunc // ends the context the node sockets are served with
}

// serveHub runs a hub behind an HTTP server whose every request is a node
// socket. The hub is shut down, and its goroutines waited for, when the
// test ends.
func serveHub(t *testing.T, cfg Config) testHub {
	t.Helper()
	cfg.Instance = "i1"
	cfg.Logger = discardLogger()
	h := NewHub(cfg, oneAccount{}, NewMemoryClaims(), noEvents{})
	root, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		heard := NewHeard() // as the server accepts node sockets
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OnPingReceived: heard.OnPing})
		if err != nil {
			return
		}
		_ = h.Serve(root, c, r.RemoteAddr, heard)
	}))
	t.Cleanup(func() {
		ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		if err := h.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		cancel()
		srv.Close()
	})
	return testHub{Hub: h, url: srv.URL, stop: cancel}
}

type oneAccount struct{}

func (oneAccount) AuthenticateNode(context.Context, string) (Account, error) {
	return Account{ID: "acct", Trust: "standard"}, nil
}

type noEvents struct{}

func (noEvents) Chunk(*Session, wire.TaskChunkPayload)   {}
func (noEvents) Result(*Session, wire.TaskResultPayload) {}
func (noEvents) BadResult(*Session, string, error)       {}
func (noEvents) Closed(*Session)                         {}
func discardLogger() *slog.Logger                        { return slog.New(slog.DiscardHandler) }

// WebSocket opcodes (RFC 6455 §5.2).
const (
	opText  byte = 0x1
	opClose byte = 0x8
	opPing  byte = 0x9
	opPong  byte = 0xa
)

// rawPeer is a node socket spoken frame by frame, so a test decides what
// it answers: coder/websocket would answer a ping by itself on its next
// read, and this peer never does.
type rawPeer struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, url string) *rawPeer {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /ws/node HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", addr, base64.StdEncoding.EncodeToString(key))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	return &rawPeer{c: c, br: br}
}

// register sends node_register and reads up to node_registered.
func (p *rawPeer) register(t *testing.T, name string) {
	t.Helper()
	reg, _ := json.Marshal(map[string]any{"msg_type": wire.MsgNodeRegister, "payload": map[string]any{
		"api_key": "k", "name": name, "capabilities": []string{"echo"}}})
	p.writeFrame(t, opText, reg)
	op, payload := p.readFrame(t, 5*time.Second)
	if op != opText || !strings.Contains(string(payload), string(wire.MsgNodeRegistered)) {
		t.Fatalf("got frame %#x %q, want node_registered", op, payload)
	}
}

// writeFrame writes one final, masked frame (a client's frames are masked).
func (p *rawPeer) writeFrame(t *testing.T, op byte, payload []byte) {
	t.Helper()
	hdr := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n < 1<<16:
		hdr = append(hdr, 0x80|126)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	mask := []byte{0x1f, 0x2e, 0x3d, 0x4c}
	hdr = append(hdr, mask...)
	masked := make([]byte, len(payload))
	for i, b := range payload {
		masked[i] = b ^ mask[i%4]
	}
	_ = p.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := p.c.Write(append(hdr, masked...)); err != nil {
		t.Fatal(err)
	}
}

// readFrame reads one frame (the server sends no fragments here), failing
// the test if none arrives within d.
func (p *rawPeer) readFrame(t *testing.T, d time.Duration) (byte, []byte) {
	t.Helper()
	_ = p.c.SetReadDeadline(time.Now().Add(d))
	var hdr [2]byte
	if _, err := io.ReadFull(p.br, hdr[:]); err != nil {
		t.Fatalf("no frame within %s: %v", d, err)
	}
	n := uint64(hdr[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(p.br, ext[:]); err != nil {
			t.Fatal(err)
		}
		n = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(p.br, ext[:]); err != nil {
			t.Fatal(err)
		}
		n = binary.BigEndian.Uint64(ext[:])
	}
	if hdr[1]&0x80 != 0 {
		t.Fatal("the server masked a frame")
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(p.br, payload); err != nil {
		t.Fatal(err)
	}
	return hdr[0] & 0x0f, payload
}

// Invariant 13: a node that stops reading is dropped once its send queue
// holds SendQueueBytes, long before it holds SendQueue messages: large
// assigns cannot pile up hundreds of MiB behind one slow node.
func TestSendQueueBoundedInBytes(t *testing.T) {
	h := serveHub(t, Config{PingInterval: time.Hour, SendQueue: 100_000, SendQueueBytes: 1 << 20})
	p := dialRaw(t, h.url)
	p.register(t, "stalled") // and never reads again
	s := h.Session(NodeID("acct", "stalled"))
	if s == nil {
		t.Fatal("no session for the registered node")
	}
	msg := wire.MustEncode(wire.MsgTaskAssign, map[string]string{"task_id": "t", "content": strings.Repeat("x", 64<<10)})
	accepted := 0
	for accepted < 5000 && s.Send(msg) {
		accepted++
	}
	// What the socket's kernel buffers took, the batch being written, and
	// at most 1 MiB of queue: a few hundred messages of 64 KiB at most.
	if accepted >= 5000 {
		t.Fatalf("the queue took %d messages of 64 KiB (%d MiB) from a node that reads nothing", accepted, accepted/16)
	}
	if !s.isClosing() {
		t.Fatal("Send refused a message but the session is not closing")
	}
	t.Logf("dropped after %d messages of 64 KiB", accepted)
}

// A node that pings the server (GemmaNet's SDK and ours do, every 20 s) is
// alive without the server's pings: it gets none while it keeps pinging,
// only pongs. Once it falls silent for PingInterval, the server pings it.
// The pinger judges silence by the hub's clock, stepped here: the node's
// pings come every third of a PingInterval of that clock however slowly
// this machine runs them.
func TestNoPingsToANodeThatPings(t *testing.T) {
	const every = 60 * time.Millisecond
	clock := newStepClock()
	h := serveHub(t, Config{PingInterval: every, PingTimeout: time.Minute, Now: clock.Now})
	p := dialRaw(t, h.url)
	p.register(t, "pinger")
	for i := range 20 { // 20 of the node's pings, 3 a PingInterval: 6 intervals
		p.writeFrame(t, opPing, []byte{byte(i)})
		// The pong comes after the server noted the ping (Heard.OnPing).
		op, payload := p.readFrame(t, 5*time.Second)
		if op != opPong || len(payload) != 1 || payload[0] != byte(i) {
			t.Fatalf("ping %d: the server sent frame %#x %q, want only the pong to it", i, op, payload)
		}
		// The node's own cadence: the time between its pings is the point.
		// The pinger looks at it (as its ticker does, a fourth of a
		// PingInterval apart), and a ping it asks for comes before a later pong.
		clock.Advance(every / 3)
		h.pingSilent(clock.Now())
	}
	clock.Advance(every)
	if op, _ := p.readFrame(t, 5*time.Second); op != opPing {
		t.Fatalf("frame %#x once the node fell silent, want the server's ping", op)
	}
}

// stepClock is a clock that moves only when told.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func newStepClock() *stepClock { return &stepClock{now: time.Unix(1_700_000_000, 0)} }

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Invariant 14: registrations past their node_register are bounded
// (MaxRegistering); one more is closed with 1013 at once rather than left
// to time out in the store or Redis with everyone else. Here the first
// registration is held in its store work (BeforeAttach), the second is
// turned away, and once the first is through a third registers.
func TestRegistrationsBeyondTheBoundAreShed(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := serveHub(t, Config{PingInterval: time.Hour, MaxRegistering: 1,
		BeforeAttach: func(_ context.Context, _, _, name string) {
			if name == "slow" {
				entered <- struct{}{}
				<-release
			}
		}})
	regFrame := func(name string) []byte {
		b, _ := json.Marshal(map[string]any{"msg_type": wire.MsgNodeRegister, "payload": map[string]any{
			"api_key": "k", "name": name, "capabilities": []string{"echo"}}})
		return b
	}
	slow := dialRaw(t, h.url)
	slow.writeFrame(t, opText, regFrame("slow"))
	<-entered

	start := time.Now()
	shed := dialRaw(t, h.url)
	shed.writeFrame(t, opText, regFrame("shed"))
	op, payload := shed.readFrame(t, 5*time.Second)
	if op != opClose || len(payload) < 2 || websocket.StatusCode(binary.BigEndian.Uint16(payload)) != wire.CloseTryAgainLater {
		t.Fatalf("a registration beyond the bound got frame %#x %q, want close 1013", op, payload)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("shed after %v, want at once", d)
	}

	close(release)
	if op, payload := slow.readFrame(t, 5*time.Second); op != opText || !strings.Contains(string(payload), string(wire.MsgNodeRegistered)) {
		t.Fatalf("the held registration got %#x %q, want node_registered", op, payload)
	}
	dialRaw(t, h.url).register(t, "after") // the slot is free again
}

// SendDirect writes in its caller's goroutine only when the socket is
// free and nothing is queued, so what one goroutine sends, directly or
// queued, reaches the node in order, and nothing sent from several at once
// is lost or torn.
func TestSendDirectKeepsOrder(t *testing.T) {
	h := serveHub(t, Config{PingInterval: time.Hour, SendQueue: 10_000}) // room for the burst: the bound is not under test
	p := dialRaw(t, h.url)
	p.register(t, "ordered")
	s := h.Session(NodeID("acct", "ordered"))
	if s == nil {
		t.Fatal("no session for the registered node")
	}
	const each = 300
	done := make(chan struct{})
	for _, g := range []string{"a", "b"} {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				msg := []byte(fmt.Sprintf(`{"g":%q,"i":%d}`, g, i))
				var ok bool
				if i%3 == 0 {
					ok = s.Send(msg)
				} else {
					ok = s.SendDirect(t.Context(), msg)
				}
				if !ok {
					t.Errorf("%s %d: refused", g, i)
					return
				}
			}
		}()
	}
	next := map[string]int{}
	for range 2 * each {
		op, payload := p.readFrame(t, 5*time.Second)
		if op != opText {
			t.Fatalf("frame %#x %q, want a text message", op, payload)
		}
		var m struct {
			G string
			I int
		}
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatalf("message %q: %v", payload, err)
		}
		if m.I != next[m.G] {
			t.Fatalf("%s: message %d after %d", m.G, m.I, next[m.G]-1)
		}
		next[m.G]++
	}
	<-done
	<-done
	if s.isClosing() {
		t.Fatal("the session closed")
	}
}
