// Package sdktest runs the project's SDK node agent in a test, stopped and
// waited for when the test ends.
package sdktest

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// Node is an SDK node agent running in the test process.
type Node struct {
	*sdk.Node
	name       string
	registered chan string // the node id, at every registration
	cancel     context.CancelFunc
	stopped    chan struct{} // closed when Run has returned
	err        error         // what Run returned; read after stopped
	logs       *buffer
}

// Run starts an SDK node. A logger (its output is printed if the test
// fails) and a fast reconnect backoff are filled in when cfg leaves them
// zero. The node is stopped when the test ends.
func Run(t testing.TB, cfg sdk.NodeConfig) *Node {
	t.Helper()
	n := &Node{name: cfg.Name, registered: make(chan string, 64), stopped: make(chan struct{}), logs: &buffer{}}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if cfg.MinBackoff == 0 && cfg.MaxBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = 10*time.Millisecond, 250*time.Millisecond
	}
	user := cfg.OnRegistered
	cfg.OnRegistered = func(id string) {
		if user != nil {
			user(id)
		}
		select {
		case n.registered <- id:
		default:
		}
	}
	node, err := sdk.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Node = node
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		n.err = node.Run(ctx)
		close(n.stopped)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-n.stopped:
		case <-time.After(10 * time.Second):
			t.Errorf("node %s: Run did not return within 10s of its context's end", cfg.Name)
		}
		if t.Failed() && n.logs.Len() > 0 {
			t.Logf("--- node %s; its logs:\n%s", cfg.Name, n.logs.String())
		}
	})
	return n
}

// WaitRegistered returns the node id of the node's next registration,
// failing the test if none comes within d.
func (n *Node) WaitRegistered(t testing.TB, d time.Duration) string {
	t.Helper()
	select {
	case id := <-n.registered:
		return id
	case <-n.stopped:
		t.Fatalf("node %s stopped before it registered: %v", n.name, n.err)
	case <-time.After(d):
		t.Fatalf("node %s did not register within %s", n.name, d)
	}
	return ""
}

// Stop cancels the node's context and returns what Run returned.
func (n *Node) Stop(t testing.TB) error {
	t.Helper()
	n.cancel()
	select {
	case <-n.stopped:
		return n.err
	case <-time.After(5 * time.Second):
		t.Fatalf("node %s: Run did not return within 5s of its context's end", n.name)
	}
	return nil
}

// Stopped is closed when Run has returned.
func (n *Node) Stopped() <-chan struct{} { return n.stopped }

// Err is what Run returned; call it after Stopped is closed.
func (n *Node) Err() error { return n.err }

// buffer is a goroutine-safe log buffer.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}

// Registrations delivers the node id at each registration (WaitRegistered
// takes from it too).
func (n *Node) Registrations() <-chan string { return n.registered }

// Cancel ends the node's context without waiting (Stop waits).
func (n *Node) Cancel() { n.cancel() }
