package nodes

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// NewClusterDirectory and Start start no goroutine (Start's subscription
// waits for Run to read it); Run returns nil once its context ends, and
// leaves nothing running.
func TestDirectoryRunOwnsItsGoroutines(t *testing.T) {
	ns := redistest.Namespace(t)
	ti := newTestInstance(t, ns, "A", []string{"A"}, ClusterConfig{})
	before := goleak.IgnoreCurrent()
	if err := ti.dir.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("Start started a goroutine: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ti.dir.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after its context ended, want nil", err)
	}
	if err := goleak.Find(before); err != nil {
		t.Errorf("Run left a goroutine behind: %v", err)
	}
}
