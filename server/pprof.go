package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"
)

// The profiling endpoint is for operators (issue 13): net/http/pprof on a
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

// startPprof binds addr and serves the profiling endpoint on it until ctx
// ends, under wg (the App's, so the drain waits for it). With an empty addr
// it does nothing and returns a nil address. A bind error is returned, so
// boot fails as it does for --listen.
//
// When ctx ends the server is closed at once rather than shut down: a
// 30-second CPU profile in progress must not hold up the end of a drain.
func startPprof(ctx context.Context, wg *sync.WaitGroup, addr string, log *slog.Logger) (net.Addr, error) {
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
	wg.Go(func() {
		stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
		defer stop()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("profiling endpoint stopped", "err", err)
		}
	})
	log.Info("profiling endpoint is serving", "pprof_addr", ln.Addr().String())
	return ln.Addr(), nil
}
