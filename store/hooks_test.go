package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

var errBoom = errors.New("boom: database unavailable")

// hookStore wraps a real store to fail, block or report the calls the
// Writer and Reputation make, so tests can wait for events instead of
// sleeping.
type hookStore struct {
	store.Store

	mu        sync.Mutex
	failTasks int   // fail this many WriteTasks calls, then succeed
	failOuts  int   // same for ApplyOutcomes
	failErr   error // what failing calls return (default errBoom)
	failAll   bool  // fail every write

	taskCalls       int // WriteTasks calls so far
	failTaskCall    int // when set, the WriteTasks call of this number (1, 2, ...) fails
	failDeadLetters int // fail this many WriteDeadLetters calls

	blockTasks chan struct{} // when set, WriteTasks waits for it to close
	blockStats chan struct{} // when set, NodeStats waits for it to close after reading

	tasksEntered chan struct{} // a WriteTasks call started (buffered)
	statsEntered chan struct{} // a NodeStats call has read (buffered)
	taskBatches  chan int      // size of each committed WriteTasks batch (buffered)
	outBatches   chan int      // size of each committed ApplyOutcomes batch (buffered)
}

func newHookStore(t *testing.T, st store.Store) *hookStore {
	return &hookStore{
		Store:        st,
		tasksEntered: make(chan struct{}, 1000),
		statsEntered: make(chan struct{}, 1000),
		taskBatches:  make(chan int, 1000),
		outBatches:   make(chan int, 1000),
	}
}

func (h *hookStore) fail(counter *int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failAll || *counter > 0 {
		if *counter > 0 {
			*counter--
		}
		if h.failErr != nil {
			return h.failErr
		}
		return errBoom
	}
	return nil
}

func (h *hookStore) setFailAll(v bool) {
	h.mu.Lock()
	h.failAll = v
	h.mu.Unlock()
}

func (h *hookStore) WriteTasks(ctx context.Context, recs []store.TaskRecord) error {
	h.tasksEntered <- struct{}{}
	h.mu.Lock()
	block := h.blockTasks
	h.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.mu.Lock()
	h.taskCalls++
	failCall := h.taskCalls == h.failTaskCall
	h.mu.Unlock()
	if failCall {
		return errBoom
	}
	if err := h.fail(&h.failTasks); err != nil {
		return err
	}
	if err := h.Store.WriteTasks(ctx, recs); err != nil {
		return err
	}
	h.taskBatches <- len(recs)
	return nil
}

func (h *hookStore) WriteDeadLetters(ctx context.Context, dls []store.DeadLetter) error {
	if err := h.fail(&h.failDeadLetters); err != nil {
		return err
	}
	return h.Store.WriteDeadLetters(ctx, dls)
}

func (h *hookStore) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.taskCalls
}

func (h *hookStore) ApplyOutcomes(ctx context.Context, outs []store.Outcome) error {
	if err := h.fail(&h.failOuts); err != nil {
		return err
	}
	if err := h.Store.ApplyOutcomes(ctx, outs); err != nil {
		return err
	}
	h.outBatches <- len(outs)
	return nil
}

func (h *hookStore) NodeStats(ctx context.Context, ids []string) (map[string]store.NodeStats, error) {
	// Read first, then block: the window a test wants to widen is the one
	// between reading the database and using what was read.
	m, err := h.Store.NodeStats(ctx, ids)
	h.statsEntered <- struct{}{}
	h.mu.Lock()
	block := h.blockStats
	h.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return m, err
}

// wait receives from ch or fails the test after a generous timeout (an
// event that never comes is a failure, not a hang).
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
