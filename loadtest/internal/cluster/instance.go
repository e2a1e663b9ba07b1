package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// Instance is one switchyard instance of a run.
type Instance struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	URL   string `json:"url"`
	PID   int    `json:"pid,omitempty"` // 0 for a --target
	Log   string `json:"log,omitempty"`

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, once exited is closed
}

// WSURL is the node socket's address.
func (in *Instance) WSURL() string {
	return "ws" + strings.TrimPrefix(in.URL, "http") + "/ws/node"
}

// Done is closed when a started instance's process has exited (Err then
// says how); nil for a --target, which never ends here.
func (in *Instance) Done() <-chan struct{} { return in.exited }

// Err is how a started instance's process exited, once Done is closed.
func (in *Instance) Err() error { return in.err }

// Exited reports whether a started instance's process has ended.
func (in *Instance) Exited() bool {
	if in.exited == nil {
		return false
	}
	select {
	case <-in.exited:
		return true
	default:
		return false
	}
}

// waitReady polls the readiness endpoint until it answers 200.
func waitReady(ctx context.Context, in *Instance, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	for {
		if in.Exited() {
			return fmt.Errorf("exited before it was ready (%v)", in.err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.URL+"/api/health", nil)
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v", limit)
		case <-time.After(50 * time.Millisecond): // another process: nothing to wait on but its answer
		}
	}
}

// Kill sends SIGKILL (kill -9) to a started instance.
func (in *Instance) Kill() error { return in.cmd.Process.Signal(syscall.SIGKILL) }

// Terminate sends SIGTERM to a started instance: it drains and exits.
func (in *Instance) Terminate() error { return in.cmd.Process.Signal(syscall.SIGTERM) }

// AwaitListed waits until the instance lists at least want nodes with
// capability (GET /api/v1/nodes, as any client may ask), asking every so
// often, until ctx ends.
func (in *Instance) AwaitListed(ctx context.Context, hc *http.Client, capability string, want int, every time.Duration) error {
	c := sdk.NewClient(in.URL, "", sdk.WithHTTPClient(hc))
	for {
		ns, err := c.Nodes(ctx, capability)
		if err == nil && len(ns) >= want {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s lists %d of %d nodes (%v)", in.Name, len(ns), want, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}
