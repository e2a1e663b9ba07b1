package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const healthcheckSummary = `Checks a server on this host, for a container's health check: the image has
no shell and no curl. It GETs /api/health (readiness: 503 while the instance
drains or cannot reach its database), or /livez with --live, and exits 0 on
200, 1 otherwise, printing one line either way.

The default URL is http://127.0.0.1 on the port of SWITCHYARD_LISTEN (the
image sets it), else of :8800.`

// runHealthcheck is `switchyard healthcheck`.
func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("healthcheck", healthcheckSummary, stderr)
	url := fs.String("url", healthcheckURL(os.Getenv(envName("listen"))), "the server's base URL")
	live := fs.Bool("live", false, "check liveness (GET /livez) instead of readiness (GET /api/health)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.parse(args); err != nil {
		return err
	}
	path := "/api/health"
	if *live {
		path = "/livez"
	}
	target := strings.TrimRight(*url, "/") + path
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", target, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(stdout, "%s: ok\n", target)
	return nil
}

// healthcheckURL is the local base URL of a server listening on listen
// (":8800", "0.0.0.0:9000"); the default port when listen is empty or
// not HOST:PORT.
func healthcheckURL(listen string) string {
	_, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" {
		return localURL("http", "")
	}
	return "http://" + net.JoinHostPort("127.0.0.1", port)
}
