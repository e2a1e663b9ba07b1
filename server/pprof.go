package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// The profiling endpoint is for operators: net/http/pprof on a
// listener of its own, never on the API's, so no route, middleware or rate
// limit of the API is involved and the API never exposes it. It has no
// authentication; the address is what keeps it private, which is why
// Validate refuses a non-loopback one unless PprofAllowRemote says the
// operator means it.

// pprofAddrProblem says what is wrong with addr as a profiling address, or
// returns "" when it may be used.
func pprofAddrProblem(addr string, allowRemote bool) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("--pprof-listen %q must be HOST:PORT, for example 127.0.0.1:6060", addr)
	}
	if allowRemote || isLoopbackHost(host) {
		return ""
	}
	return fmt.Sprintf("--pprof-listen %q is not a loopback address and the profiling endpoint has no authentication: use 127.0.0.1:PORT, or add --pprof-allow-remote if the network is yours", addr)
}

// isLoopbackHost reports whether host names only this machine. An empty
// host or 0.0.0.0 means every interface; a host name other than localhost
// is refused rather than resolved, since boot checks do no I/O.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// pprofHandler serves the standard profiles under /debug/pprof/. It is a
// mux of its own: importing net/http/pprof also registers on
// http.DefaultServeMux, which switchyard never serves.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// pprofServer is the profiling endpoint: New binds it (a bind error fails
// boot, as it does for --listen), Run serves it.
type pprofServer struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger
}

// listenPprof binds addr for the profiling endpoint. With an empty addr it
// binds nothing and returns nil.
func listenPprof(addr string, log *slog.Logger) (*pprofServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s for profiling: %w (choose another with --pprof-listen)", addr, err)
	}
	srv := &http.Server{
		Handler:           pprofHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: /debug/pprof/profile?seconds=N writes after N seconds.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	// Connections wait in the listener's backlog until Run serves them.
	log.Info("profiling endpoint is serving", "pprof_addr", ln.Addr().String())
	return &pprofServer{ln: ln, srv: srv, log: log}, nil
}

// Addr is the address the endpoint is bound to.
func (p *pprofServer) Addr() net.Addr { return p.ln.Addr() }

// Run serves the endpoint until ctx ends, then closes it at once rather
// than shutting it down: a 30-second CPU profile in progress must not hold
// up the end of a drain. A serving error is logged, not returned: the
// instance serves on without its profiles.
func (p *pprofServer) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = p.srv.Close() })
	defer stop()
	if err := p.srv.Serve(p.ln); !errors.Is(err, http.ErrServerClosed) {
		p.log.Error("profiling endpoint stopped", "err", err)
	}
	_ = p.ln.Close() // Serve leaves it open when the server was closed before it began
	return nil
}

// Close releases the listener of an endpoint that Run never served (New
// failed after binding it). Idempotent.
func (p *pprofServer) Close() error {
	_ = p.srv.Close()
	_ = p.ln.Close()
	return nil
}
