package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Fixed limits of the HTTP listener; the configurable ones are in Config
// (see httpLimitsFor).
const (
	// maxHeaderBytes caps a request's line and headers (net/http's default
	// is 1 MiB): every open connection may hold that much while its headers
	// arrive, and ours carry a key and a few small fields. Over it net/http
	// answers 431 itself.
	maxHeaderBytes = 64 << 10
	// acceptErrorLogEvery rate-limits the warning about accept errors: at
	// EMFILE the accept loop fails hundreds of times a second.
	acceptErrorLogEvery = 10 * time.Second
)

// httpLimits are the HTTP server's connection limits. Zero turns a limit off.
type httpLimits struct {
	ReadHeaderTimeout time.Duration
	BodyReadTimeout   time.Duration
	IdleTimeout       time.Duration
	MaxConnsPerIP     int
}

// httpLimitsFor is the limits of an instance configured with cfg. Behind a
// proxy (TrustProxy) every connection comes from the proxy's address, so
// the per-address cap would cap the whole service: it is off there, and
// the proxy is expected to limit per client.
func httpLimitsFor(cfg Config) httpLimits {
	// The defaults (config.go) and why: the body timeout lets 2 MB (the body
	// cap) arrive at 67 KB/s, and cuts off a client that trickles a body
	// before anything looks at its key (the body of /api/v1/request is read
	// first); 256 connections per address leave room for NAT and pooled
	// clients while keeping one address from holding a large share of the
	// process's file descriptors.
	l := httpLimits{
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		BodyReadTimeout:   cfg.BodyReadTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxConnsPerIP:     max(cfg.MaxConnsPerIP, 0),
	}
	if cfg.TrustProxy {
		l.MaxConnsPerIP = 0
	}
	return l
}

// listen binds the instance's address and builds the HTTP server in front
// of its router, with the limits l.
func (a *App) listen(l httpLimits) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot listen on %s: %w (choose another with --listen)", a.cfg.Listen, err)
	}
	return newHTTPServer(a.echo, l, a.log), newLimitListener(ln, l.MaxConnsPerIP, a.log, newListenMetrics(a.registry)), nil
}

// newHTTPServer is the server for handler with the limits l. net/http's own
// complaints (TLS junk, malformed requests) stay at debug: a client can
// produce any number of them.
func newHTTPServer(handler http.Handler, l httpLimits, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           bodyDeadline(handler, l.BodyReadTimeout),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// bodyDeadline gives reading a request's body a deadline of d.
//
// http.Server.ReadTimeout would do it for every request, but its deadline
// stays on the connection for the whole request: once it passes, net/http's
// background read (which watches for the client going away) fails and
// cancels the request's context, cutting an SSE stream that outlives it.
// So the deadline is set here only for a request that has a body, and
// cleared as soon as the body has been read to its end; an SSE
// stream and the node WebSocket (no body; its hijacked connection is
// cleared again in smallBuffers) then run without one. net/http sets the
// connection's read deadline afresh for the next request on it.
func bodyDeadline(next http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			next.ServeHTTP(w, r) // not a net/http connection (tests with a recorder)
			return
		}
		body := r.Body
		r.Body = &deadlineBody{body: body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		next.ServeHTTP(w, r)
		// net/http judges what is left of a body by its own type, after
		// the handler: given its body back, it sends the answer to a
		// request that left more than 256 KiB unread at once, and closes
		// the connection after it (half-closing first, so the client reads
		// the answer). Given the wrapper, it read up to 256 KiB of any
		// unread body before answering: a wrong key announcing 2 MB and
		// sending nothing got its 401 at the body deadline (invariant 16).
		r.Body = body
	})
}

// deadlineBody clears the read deadline once its body has been read to
// the end. Only then: after a timeout, or when a handler answers without
// reading the body, net/http discards what is left of it (up to 256 KiB)
// before it reuses the connection, and that must stay under the deadline
// too, or a trickled body would hold the connection after all.
type deadlineBody struct {
	body  io.ReadCloser
	clear func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.clear()
	}
	return n, err
}

func (b *deadlineBody) Close() error { return b.body.Close() }

// listenMetrics count what the listener refuses or fails to accept.
type listenMetrics struct {
	acceptErrors prometheus.Counter
	refused      prometheus.Counter
	open         prometheus.Gauge
}

func newListenMetrics(reg prometheus.Registerer) *listenMetrics {
	m := &listenMetrics{
		acceptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "http", Name: "accept_errors_total",
			Help: "Errors accepting a connection (for example EMFILE, too many open files).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "http", Name: "connections_refused_total",
			Help: "Connections closed at once because their client address had too many open.",
		}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "switchyard", Subsystem: "http", Name: "connections_open",
			Help: "Open HTTP connections, node sockets included.",
		}),
	}
	reg.MustRegister(m.acceptErrors, m.refused, m.open)
	return m
}

// limitListener caps the open connections per client IP and reports
// accept errors. The count is by the connection's remote address, not
// X-Forwarded-For: a header is the client's word, the address is not.
type limitListener struct {
	net.Listener
	max     int // 0: no cap
	log     *slog.Logger
	metrics *listenMetrics

	mu    sync.Mutex
	perIP map[string]int

	lastWarn   atomic.Int64 // unix nanoseconds of the last accept-error warning
	suppressed atomic.Int64 // accept errors since that warning
}

func newLimitListener(ln net.Listener, maxPerIP int, log *slog.Logger, m *listenMetrics) *limitListener {
	return &limitListener{Listener: ln, max: maxPerIP, log: log, metrics: m, perIP: make(map[string]int)}
}

// Accept returns the next connection whose address is under its cap;
// connections over it are closed at once, without a byte read or written
// (an HTTP answer would cost the very resources the cap protects).
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.acceptError(err)
			}
			// http.Server retries temporary errors with a backoff of its own.
			return nil, err
		}
		ip := remoteIP(c)
		if !l.take(ip) {
			l.metrics.refused.Inc()
			_ = c.Close()
			continue
		}
		l.metrics.open.Inc()
		return &limitConn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

func (l *limitListener) take(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.perIP[ip] >= l.max {
		return false
	}
	l.perIP[ip]++
	return true
}

func (l *limitListener) release(ip string) {
	l.metrics.open.Dec()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perIP[ip] <= 1 {
		delete(l.perIP, ip) // the map holds only addresses with open connections
		return
	}
	l.perIP[ip]--
}

// open is the number of open connections from ip (tests).
func (l *limitListener) open(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.perIP[ip]
}

// acceptError counts every accept error and warns at most once per
// acceptErrorLogEvery, with the number it did not log.
func (l *limitListener) acceptError(err error) {
	l.metrics.acceptErrors.Inc()
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last < int64(acceptErrorLogEvery) || !l.lastWarn.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return
	}
	l.log.Warn("cannot accept connections", "err", err, "similar_errors_not_logged", l.suppressed.Swap(0))
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// limitConn gives its slot back on its first Close. net/http closes each
// connection once, but a hijacker (the WebSocket) closes it again later.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
