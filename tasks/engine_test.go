package tasks

import (
	"context"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/bus"
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

// Before Run, the owner side could not publish a node's answer to another
// instance, so it refuses that instance's assigns (the requester tries
// another node) rather than start a task whose answer would be lost and
// whose requester would wait for its deadline. Its own instance's requests
// need no publish. Once Ready, assigns go through to the node lookup.
func TestOwnerRefusesOtherInstancesUntilRun(t *testing.T) {
	e := New(Config{Instance: "O", Logger: quietLog()},
		Deps{Bus: newFakeBus(), Nodes: func(nodes.Events) NodeSide { return NodeSide{Sessions: noSessions{}, Directory: &fakeDir{}} }})
	assign := func(replyTo string) string {
		t.Helper()
		err := e.owner.assign(&bus.Envelope{Kind: bus.KindAssign, TaskID: "t", NodeID: "n", ReplyTo: replyTo})
		if err == nil {
			t.Fatal("assigned to a node that is not connected")
		}
		return err.Error()
	}
	const notRunning, notHere = "refused: the instance holding the node is not running yet",
		"refused: the node is not connected to this instance"
	if got := assign("R"); got != notRunning {
		t.Errorf("another instance's assign before Run: %q, want %q", got, notRunning)
	}
	if got := assign("O"); got != notHere {
		t.Errorf("this instance's assign before Run: %q, want %q", got, notHere)
	}
	select {
	case <-e.Ready():
		t.Fatal("Ready before Run")
	default:
	}
	runEngine(t, e)
	<-e.Ready()
	if got := assign("R"); got != notHere {
		t.Errorf("another instance's assign once running: %q, want %q", got, notHere)
	}
}
