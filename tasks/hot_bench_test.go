package tasks

import (
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
)

// BenchmarkTracker is one task's life on the requester side: add, deliver
// its result from the owner, take it, remove.
func BenchmarkTracker(b *testing.B) {
	t := newTracker()
	env := &bus.Envelope{Kind: bus.KindResult, From: "o", NodeID: "n", Gen: 1, Result: &bus.Result{Status: "completed"}}
	var buf []queued
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := Request{TaskID: strconv.Itoa(i)}
		p := t.add(&req, time.Time{})
		p.retarget("o", "n", 1, 1)
		e := *env
		e.TaskID = req.TaskID
		if !t.deliver(&e) {
			b.Fatal("not delivered")
		}
		buf = p.take(buf)
		t.remove(p)
		i++
	}
}

// BenchmarkTrackerParallel is the same from every core at once, as the bus
// loop and the HTTP handlers would.
func BenchmarkTrackerParallel(b *testing.B) {
	t := newTracker()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var buf []queued
		i := 0
		id := strconv.Itoa(int(time.Now().UnixNano()))
		for pb.Next() {
			req := Request{TaskID: id + "-" + strconv.Itoa(i)}
			p := t.add(&req, time.Time{})
			p.retarget("o", "n", 1, 1)
			t.deliver(&bus.Envelope{Kind: bus.KindResult, From: "o", TaskID: req.TaskID, NodeID: "n", Gen: 1, Result: &bus.Result{}})
			buf = p.take(buf)
			t.remove(p)
			i++
		}
	})
}

// BenchmarkForwardTable is one task's life on the owner side: add, mark
// sent, one chunk, take it with the result.
func BenchmarkForwardTable(b *testing.B) {
	ft := newForwardTable(time.Minute)
	sess := &nodes.Session{}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e := &fwdEntry{taskID: strconv.Itoa(i), nodeID: "n", replyTo: "r", sess: sess, gen: 1}
		if !ft.add(e) {
			b.Fatal("duplicate")
		}
		ft.sent(e, true)
		if _, res := ft.chunk(e.taskID, sess, 10, 1<<20); res != chunkForward {
			b.Fatal("chunk dropped")
		}
		if e, _ := ft.take(e.taskID, sess); e == nil {
			b.Fatal("not taken")
		}
		i++
	}
}
