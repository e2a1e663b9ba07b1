package tasks

import (
	"context"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/nodes"
)

// runEngine runs e until the returned stop is called or the test ends;
// stop returns once e's Run has (and fails the test if Run failed).
func runEngine(t *testing.T, e *Engine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("engine Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// New starts nothing; Run's loops are gone once it returns.
func TestEngineNewStartsNothing(t *testing.T) {
	before := goleak.IgnoreCurrent()
	e := New(Config{Instance: "R", Logger: quietLog()},
		Deps{Bus: newFakeBus(), Nodes: func(nodes.Events) NodeSide { return NodeSide{Sessions: noSessions{}, Directory: &fakeDir{}} }})
	if err := goleak.Find(before); err != nil {
		t.Fatalf("New started a goroutine: %v", err)
	}
	runEngine(t, e)()
	if err := goleak.Find(before); err != nil {
		t.Errorf("Run left a goroutine behind: %v", err)
	}
}
