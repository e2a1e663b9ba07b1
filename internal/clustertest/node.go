package clustertest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"switchyard/sdk"
)

// Node is an SDK node agent running in the test process.
type Node struct {
	*sdk.Node
	name       string
	registered chan string // the node id, at every registration
	cancel     context.CancelFunc
	stopped    chan struct{} // closed when Run has returned
	err        error         // what Run returned; read after stopped
	logs       *logBuffer
}

// RunNode starts an SDK node (a logger and a fast reconnect backoff filled
// in when cfg leaves them zero). It is stopped when the test ends, and its
// logs are printed if the test failed.
func RunNode(t testing.TB, cfg sdk.NodeConfig) *Node {
	t.Helper()
	n := &Node{name: cfg.Name, registered: make(chan string, 64), stopped: make(chan struct{}), logs: &logBuffer{}}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if cfg.MinBackoff == 0 && cfg.MaxBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = 50*time.Millisecond, 250*time.Millisecond
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
		if t.Failed() {
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
