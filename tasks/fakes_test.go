package tasks

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
)

// fakeBus is a Bus whose answers a test sets: subscriber counts, an error
// (Redis unreachable), and a gate that holds every Publish until opened.
type fakeBus struct {
	mu        sync.Mutex
	receivers map[string]int
	err       error
	published []*bus.Envelope
	gate      chan struct{} // nil: Publish returns at once
	entered   chan struct{} // a Publish started (buffered)
}

func newFakeBus() *fakeBus {
	return &fakeBus{receivers: map[string]int{}, entered: make(chan struct{}, 64)}
}

func (b *fakeBus) set(id string, n int) { b.mu.Lock(); b.receivers[id] = n; b.mu.Unlock() }
func (b *fakeBus) fail(err error)       { b.mu.Lock(); b.err = err; b.mu.Unlock() }

func (b *fakeBus) Publish(ctx context.Context, to string, e *bus.Envelope) (int, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	if b.gate != nil {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.published = append(b.published, e)
	return b.receivers[to], b.err
}

func (b *fakeBus) Receivers(_ context.Context, ids []string) (map[string]int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	out := map[string]int{}
	for _, id := range ids {
		out[id] = b.receivers[id]
	}
	return out, nil
}

func (b *fakeBus) sent() []*bus.Envelope {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*bus.Envelope(nil), b.published...)
}

// fakeDir is a Directory with no nodes that remembers the hints it got.
type fakeDir struct {
	mu   sync.Mutex
	gone []string
}

func (d *fakeDir) Candidates(dst []nodes.Candidate, _ string) []nodes.Candidate { return dst }
func (d *fakeDir) WaitSlot(c string, p nodes.Place) *nodes.Waiter {
	return nodes.NewWaiters().Wait(c, p)
}
func (d *fakeDir) Hidden(string) bool            { return false }
func (d *fakeDir) MarkFull(string)               {}
func (d *fakeDir) Reserve(string) (func(), bool) { return func() {}, true }
func (d *fakeDir) Refresh(context.Context) error { return nodes.ErrNoRemote }
func (d *fakeDir) MarkGone(instance string) {
	d.mu.Lock()
	d.gone = append(d.gone, instance)
	d.mu.Unlock()
}

func (d *fakeDir) goneList() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.gone...)
}

// noSessions is an instance with no node connected.
type noSessions struct{}

func (noSessions) Session(string) *nodes.Session { return nil }

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newEnv is a result for task "t" from an owner, node and generation.
func newEnv(from, node string, gen uint64) *bus.Envelope {
	return &bus.Envelope{Kind: bus.KindResult, TaskID: "t", From: from, NodeID: node, Gen: gen, Result: &bus.Result{}}
}

func testCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
