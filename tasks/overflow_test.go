package tasks_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/tasks"
)

// heapInuse is the live heap after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Invariant 13: a node floods a streaming task with empty deltas while its
// client does not read (its Chunk hook blocks). The requester buffers up
// to StreamQueueBytes, then fails the task with stream_overflow, tells the
// node to stop, and its heap stays flat; the chunks still coming are
// dropped. Run on one instance (the fast path) and across two on a bus.
//
// The result cap is set far above the flood, so only the stream queue's
// bound can stop it. Without that bound the tracker queued every chunk
// (~200 bytes each): 300,000 of them grew the heap by about 60 MiB, and
// the node was never cancelled.
func TestStreamOverflowSlowClient(t *testing.T) {
	for _, cross := range []bool{false, true} {
		name := map[bool]string{false: "same instance", true: "across the bus"}[cross]
		t.Run(name, func(t *testing.T) {
			cfg := tasks.Config{ResultMaxBytes: 1 << 30}
			var r, o *instance
			if cross {
				r, o, _ = pair(t, cfg)
			} else {
				b := bus.NewMemory()
				t.Cleanup(func() { _ = b.Close() })
				o = newInstance(t, "A", b, nil, cfg)
				r = o
			}
			n := nodetest.Connect(t, o.wsURL, nodetest.WithCancel(nodetest.Reg("good", "w", "echo")))
			release := make(chan struct{})
			first := make(chan struct{}, 1)
			ch := run(t, r, context.Background(), tasks.Request{TaskID: "flood", TaskType: "echo", Stream: true},
				tasks.Hooks{Chunk: func(string) error {
					select {
					case first <- struct{}{}:
						<-release // the client stops reading after its first chunk
					default:
					}
					return nil
				}})
			n.Expect("task_assign")
			before := heapInuse()

			stop := make(chan struct{})
			sent := make(chan int, 1)
			go func() { sent <- n.Flood("flood", "", 300_000, stop) }()
			<-first
			m := n.Recv(20 * time.Second)
			close(stop)
			total := <-sent
			if m.MsgType != "task_cancel" || m.TaskID() != "flood" || m.Payload["reason"] != string(tasks.CodeStreamOverflow) {
				t.Fatalf("after %d chunks the node got %s %v, want task_cancel for stream_overflow", total, m.MsgType, m.Payload)
			}
			// Chunks the node sent before it read the cancel are still
			// arriving; let them land before measuring.
			waitUntil(t, func() bool { return o.eng.Forwarding() == 0 })
			grew := int64(heapInuse()) - int64(before)
			t.Logf("%d empty chunks sent; heap grew %d KiB; %d bytes queued", total, grew/1024, r.eng.Tracker().Queued())
			if grew > 8<<20 {
				t.Fatalf("the heap grew %d MiB under a flood to a client that does not read", grew>>20)
			}
			close(release)
			got := wait(t, ch)
			if code(got.err) != tasks.CodeStreamOverflow {
				t.Fatalf("outcome %+v, want stream_overflow", got)
			}
			if q := r.eng.Tracker().Queued(); q != 0 || r.eng.Requesting() != 0 {
				t.Fatalf("the tracker still holds %d bytes for %d tasks", q, r.eng.Requesting())
			}
		})
	}
}

// With the default result cap, a flood of empty deltas to a client that
// keeps up ends at the cap: each chunk costs ChunkOverhead, so at most
// ResultMaxBytes/ChunkOverhead chunks pass (invariant 13: the chunk count
// of a task is bounded too).
func TestEmptyChunksHitTheResultCap(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{ResultMaxBytes: 64 * tasks.ChunkOverhead})
	n := nodetest.Connect(t, o.wsURL, nodetest.WithCancel(nodetest.Reg("good", "w", "echo")))
	chunks := 0
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "e", TaskType: "echo", Stream: true},
		tasks.Hooks{Chunk: func(string) error { chunks++; return nil }})
	n.Expect("task_assign")
	stop := make(chan struct{})
	done := make(chan int, 1)
	go func() { done <- n.Flood("e", "", 10_000, stop) }()
	m := n.Recv(10 * time.Second)
	close(stop)
	<-done
	if m.MsgType != "task_cancel" || m.Payload["reason"] != string(tasks.CodeResultTooLarge) {
		t.Fatalf("node got %s %v, want task_cancel for result_too_large", m.MsgType, m.Payload)
	}
	got := wait(t, ch)
	if code(got.err) != tasks.CodeResultTooLarge || chunks != 64 {
		t.Fatalf("outcome %v after %d chunks, want result_too_large after 64", got.err, chunks)
	}
}
