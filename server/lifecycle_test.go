package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A component that stops on its own (here the HTTP server, its listener
// closed under it) makes the instance drain as on SIGTERM, and Run returns
// that component's error once everything has stopped.
func TestRunReturnsAComponentsFailureAfterDraining(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	if code, _ := ta.call(t, "GET", "/api/v1/status", key, nil, nil); code != 200 {
		t.Fatalf("status: HTTP %d", code)
	}
	_ = ta.listener.Close()
	var err error
	select {
	case err = <-ta.done:
		ta.done <- nil // for the cleanup's stop
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its HTTP server failing")
	}
	if err == nil || !strings.Contains(err.Error(), "http server") {
		t.Fatalf("Run = %v, want the HTTP server's error", err)
	}
	if !ta.draining.Load() {
		t.Error("Run returned without draining")
	}
	// The drain closed the store: nothing is left running on it.
	if _, err := ta.store.ListKeys(context.Background(), ""); err == nil {
		t.Error("the store still answers after Run returned; the drain did not close it")
	}
}

// Each stage's Runs have returned when stop does, and a Run that ends
// because its stage was stopped is no failure, even with an error.
func TestStageStopWaitsAndIsNoFailure(t *testing.T) {
	g := newGroup(testLogger(t))
	s := newStage(context.Background())
	returned := make(chan struct{})
	g.start(s, "slow", func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a component's own stop, after its context ended
		close(returned)
		return errors.New("could not flush everything")
	})
	s.stop()
	select {
	case <-returned:
	default:
		t.Fatal("stop returned before the stage's Run did")
	}
	select {
	case <-g.failed:
		t.Error("a Run that ended with its stage counted as a failure")
	default:
	}
	if err := g.wait(); err != nil {
		t.Errorf("wait = %v, want nil", err)
	}
}

// A Run that fails before its stage ends is the group's failure.
func TestGroupFailureIsReported(t *testing.T) {
	g := newGroup(testLogger(t))
	s := newStage(context.Background())
	boom := errors.New("boom")
	g.start(s, "broken", func(context.Context) error { return boom })
	select {
	case <-g.failed:
	case <-time.After(5 * time.Second):
		t.Fatal("a failing Run did not close failed")
	}
	s.stop()
	if err := g.wait(); !errors.Is(err, boom) || !strings.Contains(err.Error(), "broken") {
		t.Errorf("wait = %v, want boom named by its component", err)
	}
}
