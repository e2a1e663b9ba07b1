// Package fakeserver is a scripted coordinator for testing the node agent:
// it accepts node WebSockets at /ws/node and lets a test read what the node
// sends and answer as the real server would (or would not).
package fakeserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Server accepts node connections. Each one is handed to the test through
// Accept; the test drives it.
type Server struct {
	URL string // ws://127.0.0.1:PORT/ws/node

	srv    *httptest.Server
	conns  chan *Conn
	refuse atomic.Int32 // handshakes still to refuse with 403

	mu       sync.Mutex
	attempts []time.Time // every handshake attempt, refused or not
	live     map[*Conn]struct{}
	closed   bool
}

// New starts a server. Close it when done.
func New() *Server {
	s := &Server{conns: make(chan *Conn, 64), live: map[*Conn]struct{}{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/ws/node"
	return s
}

// Close drops every connection and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.live {
		c.ws.CloseNow()
	}
	s.mu.Unlock()
	s.srv.Close()
}

// RefuseNext makes the next n handshakes fail with 403, as the server's
// per-IP connection limit does.
func (s *Server) RefuseNext(n int) { s.refuse.Store(int32(n)) }

// Attempts returns the time of every handshake attempt so far.
func (s *Server) Attempts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.attempts...)
}

// Accept returns the next node connection whose WebSocket handshake succeeded.
func (s *Server) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("fakeserver: no connection: %w", ctx.Err())
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/ws/node" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.attempts = append(s.attempts, time.Now())
	s.mu.Unlock()
	if s.refuse.Add(-1) >= 0 {
		http.Error(w, "too many connection attempts", http.StatusForbidden)
		return
	}
	c := &Conn{in: make(chan wire.Envelope, 4096)}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		OnPingReceived: func(context.Context, []byte) bool { return !c.ignorePings.Load() },
	})
	if err != nil {
		return
	}
	ws.SetReadLimit(sdk.MaxMessageBytes)
	c.ws = ws
	s.mu.Lock()
	s.live[c] = struct{}{}
	if s.closed {
		ws.CloseNow() // Close ran while this handshake was under way
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.live, c)
		s.mu.Unlock()
		ws.CloseNow()
	}()
	s.conns <- c
	c.readLoop()
}

// Conn is one node connection as the server sees it.
type Conn struct {
	ws          *websocket.Conn
	in          chan wire.Envelope // closed when the connection ends
	err         error              // why it ended; read after in is closed
	ignorePings atomic.Bool
}

func (c *Conn) readLoop() {
	defer close(c.in)
	for {
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.err = err
			return
		}
		if typ != websocket.MessageText {
			c.err = errors.New("fakeserver: node sent a binary message")
			c.ws.Close(websocket.StatusUnsupportedData, "binary")
			return
		}
		env, err := wire.ParseEnvelope(data)
		if err != nil {
			c.err = fmt.Errorf("fakeserver: malformed message %q: %w", data, err)
			c.ws.Close(websocket.StatusPolicyViolation, "malformed")
			return
		}
		c.in <- env
	}
}

// Next returns the next message from the node. Once the connection has
// ended and every message has been read, it returns why it ended.
func (c *Conn) Next(ctx context.Context) (wire.Envelope, error) {
	select {
	case env, ok := <-c.in:
		if !ok {
			return wire.Envelope{}, fmt.Errorf("fakeserver: connection ended: %w", c.err)
		}
		return env, nil
	case <-ctx.Done():
		return wire.Envelope{}, fmt.Errorf("fakeserver: waiting for a message: %w", ctx.Err())
	}
}

// NextOf skips heartbeats and returns the next other message, decoding its
// payload into v (if not nil). It fails if that message is not of msgType.
func (c *Conn) NextOf(ctx context.Context, msgType wire.MsgType, v any) (wire.Envelope, error) {
	for {
		env, err := c.Next(ctx)
		if err != nil {
			return env, err
		}
		if env.MsgType == wire.MsgHeartbeat && msgType != wire.MsgHeartbeat {
			continue
		}
		if env.MsgType != msgType {
			return env, fmt.Errorf("fakeserver: got %s %s, want %s", env.MsgType, env.Payload, msgType)
		}
		if v == nil {
			return env, nil
		}
		return env, env.DecodePayload(v)
	}
}

// Rest reads until the connection ends and returns every message that was
// not a heartbeat, and why it ended.
func (c *Conn) Rest(ctx context.Context) ([]wire.Envelope, error) {
	var out []wire.Envelope
	for {
		select {
		case env, ok := <-c.in:
			if !ok {
				return out, c.err
			}
			if env.MsgType != wire.MsgHeartbeat {
				out = append(out, env)
			}
		case <-ctx.Done():
			return out, fmt.Errorf("fakeserver: connection did not end: %w", ctx.Err())
		}
	}
}

// Send sends a message to the node.
func (c *Conn) Send(ctx context.Context, msgType wire.MsgType, payload any) error {
	data, err := wire.Encode(msgType, payload)
	if err != nil {
		return err
	}
	return c.ws.Write(ctx, websocket.MessageText, data)
}

// SendRaw sends data as one text message, as it is.
func (c *Conn) SendRaw(ctx context.Context, data []byte) error {
	return c.ws.Write(ctx, websocket.MessageText, data)
}

// Accept reads node_register, answers node_registered with nodeID and
// returns what the node registered with.
func (c *Conn) Accept(ctx context.Context, nodeID string) (wire.RegisterPayload, error) {
	var p wire.RegisterPayload
	if _, err := c.NextOf(ctx, wire.MsgNodeRegister, &p); err != nil {
		return p, err
	}
	return p, c.Send(ctx, wire.MsgNodeRegistered, wire.RegisteredPayload{NodeID: nodeID})
}

// Reject reads node_register, answers with an error and closes with closeCode.
func (c *Conn) Reject(ctx context.Context, code wire.ErrorCode, message string, closeCode websocket.StatusCode) error {
	if _, err := c.NextOf(ctx, wire.MsgNodeRegister, nil); err != nil {
		return err
	}
	if err := c.Send(ctx, wire.MsgError, wire.ErrorPayload{Code: string(code), Message: message}); err != nil {
		return err
	}
	// The node may hang up on reading the error, before the close handshake.
	_ = c.Close(closeCode, message)
	return nil
}

// Close closes the connection with a close frame (the node sees the code).
// It returns once the node has answered the close or after 5 s.
func (c *Conn) Close(code websocket.StatusCode, reason string) error {
	return c.ws.Close(code, reason)
}

// Drop cuts the connection without a close frame.
func (c *Conn) Drop() { c.ws.CloseNow() }

// Ping pings the node and waits for its pong.
func (c *Conn) Ping(ctx context.Context) error { return c.ws.Ping(ctx) }

// IgnorePings stops answering the node's pings, as a server that hangs would.
func (c *Conn) IgnorePings() { c.ignorePings.Store(true) }
