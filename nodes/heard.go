package nodes

import (
	"context"
	"sync/atomic"
	"time"
)

// Heard is when a node's connection last carried anything from the node:
// a message, a WebSocket ping (GemmaNet's SDK and ours ping every 20 s),
// or the pong to one of ours. The session pings a node only when it has
// been silent for PingInterval: a node that pings us, or heartbeats, is
// alive without our pings, and on a large fleet those were a third of an
// idle instance's socket traffic (BENCHMARKS.md, "the fleet profile").
//
// The server makes one before accepting the WebSocket, gives OnPing to
// coder/websocket (AcceptOptions.OnPingReceived), and hands it to Serve.
type Heard struct {
	at  atomic.Int64
	now func() time.Time // the hub's clock (Config.Now), set by Serve
}

// NewHeard returns a Heard that heard the node now.
func NewHeard() *Heard {
	h := &Heard{now: time.Now}
	h.mark()
	return h
}

// OnPing is for websocket.AcceptOptions.OnPingReceived: it notes the ping
// and lets the library answer it.
func (h *Heard) OnPing(context.Context, []byte) bool {
	h.mark()
	return true
}

func (h *Heard) mark() { h.at.Store(h.now().UnixNano()) }

// setClock makes now the clock of the marks, and marks now. Serve calls it
// before it reads from the node, so no mark runs beside it.
func (h *Heard) setClock(now func() time.Time) {
	h.now = now
	h.mark()
}

// silentFor is how long the node has said nothing.
func (h *Heard) silentFor(now time.Time) time.Duration { return now.Sub(time.Unix(0, h.at.Load())) }
