package server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/ratelimit"
)

// nodeSocket is GET /ws/node: the handshake limit per client IP, then the
// WebSocket upgrade and the node handshake; the hub then runs the
// connection on goroutines of its own and this handler returns.
func (a *App) nodeSocket(c echo.Context) error {
	if a.draining.Load() {
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeNotReady, Message: "this instance is draining; connect to another", RetryAfter: "1"}
	}
	ip := c.RealIP()
	if a.cfg.HandshakeRate > 0 {
		limit := ratelimit.PerMinute(a.cfg.HandshakeRate)
		res, err := a.limiter.Allow(c.Request().Context(), "handshake:"+ip, limit)
		if err == nil {
			// The same headers as every other limited route, so a node can
			// pace itself before it is refused.
			h := c.Response().Header()
			h.Set(ratelimit.HeaderLimit, strconv.Itoa(limit.Rate))
			h.Set(ratelimit.HeaderRemaining, strconv.Itoa(res.Remaining))
			h.Set(ratelimit.HeaderReset, strconv.FormatInt(int64((res.ResetAfter+time.Second-1)/time.Second), 10))
		}
		switch {
		case err != nil:
			a.log.Warn("rate limiter unavailable; allowing the node handshake", "err", err)
		case !res.Allowed:
			// GemmaNet refuses with 403 here and its SDK retries with backoff.
			return &apiError{Status: http.StatusForbidden, Code: CodeRateLimited,
				Message: "too many node connections from this address; retry later", RetryAfter: retryAfter(res)}
		}
	}
	// Nodes authenticate with an API key in their first message, not with
	// cookies, so cross-origin connections carry no CSRF risk.
	heard := nodes.NewHeard() // the node's own pings show it is alive: ours go to silent nodes only
	conn, err := websocket.Accept(smallBuffers{c.Response()}, c.Request(),
		&websocket.AcceptOptions{InsecureSkipVerify: true, OnPingReceived: heard.OnPing})
	if err != nil {
		return nil // Accept has answered the client
	}
	// The request's context ends with the hijack; the session lives on the
	// instance's root context instead.
	_ = a.hub.Serve(a.root, conn, ip, heard)
	return nil
}

// socketBuffer is the size of a node socket's read and write buffers.
// net/http hands a hijacked connection 4 KiB of each; node messages are
// small, larger ones bypass the buffers anyway, and an idle node is
// budgeted at 32 KiB in all.
const socketBuffer = 1024

// smallBuffers hijacks like the ResponseWriter it wraps, then swaps the
// 4 KiB buffers for smaller ones, keeping any bytes already read.
type smallBuffers struct{ http.ResponseWriter }

func (w smallBuffers) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// The socket outlives the request: no deadline of the HTTP server's
	// (headers, body, a write) may cut it later. The session sets its own.
	_ = conn.SetDeadline(time.Time{})
	if brw.Writer.Buffered() > 0 {
		return conn, brw, nil // never the case after a 101, but do not lose bytes
	}
	br := bufio.NewReaderSize(conn, socketBuffer)
	if n := brw.Reader.Buffered(); n > 0 {
		// The node may have sent its first frame with the upgrade request.
		// Those bytes must sit in the new reader's buffer (Accept looks there),
		// so read them into it now; they are all there, nothing blocks.
		pending, _ := brw.Reader.Peek(n)
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(pending)), conn), max(n, socketBuffer))
		if _, err := br.Peek(n); err != nil {
			return conn, brw, nil
		}
	}
	return conn, bufio.NewReadWriter(br, bufio.NewWriterSize(conn, socketBuffer)), nil
}
