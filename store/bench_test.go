package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/store"
)

// The Writer's two statements, on its hot path: a batch of task records and
// a batch of node outcomes, on each database.

func benchStores(b *testing.B, f func(b *testing.B, st store.Store)) {
	b.Run("sqlite", func(b *testing.B) {
		st, err := store.Open(b.Context(), store.Options{DataDir: b.TempDir(), Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		f(b, st)
	})
	b.Run("postgres", func(b *testing.B) {
		st, err := store.Open(b.Context(), store.Options{DatabaseURL: pgtest.SchemaURL(b, "sybench"), Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		f(b, st)
	})
}

func BenchmarkWriteTasks256(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		now, n := time.Now(), 0
		recs := make([]store.TaskRecord, 256)
		for b.Loop() {
			for i := range recs {
				n++
				recs[i] = store.TaskRecord{ID: fmt.Sprintf("t%09d", n), AccountID: "acct", TaskType: "chat", Status: store.StatusCompleted,
					NodeIDs: []string{"n1", "n2"}, Attempts: 1, CreatedAt: now, AssignedAt: now, FinishedAt: now}
			}
			if err := st.WriteTasks(b.Context(), recs); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkApplyOutcomes64(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		now := time.Now()
		outs := make([]store.Outcome, 64)
		for i := range outs {
			outs[i] = store.Outcome{NodeID: fmt.Sprintf("n%02d", i%16), Success: i%5 != 0, ElapsedMs: 40, At: now}
		}
		for b.Loop() {
			if err := st.ApplyOutcomes(b.Context(), outs); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWriterFlush500 is the Writer's own path around the statement: a
// full batch of task records queued, then written by one Flush (head,
// write, removal from the queue and the index).
func BenchmarkWriterFlush500(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		w := store.NewWriter(st, store.WriterConfig{Logger: quiet})
		now, n := time.Now(), 0
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			for range 500 {
				n++
				w.AddTask(store.TaskRecord{ID: fmt.Sprintf("t%09d", n), AccountID: "acct", TaskType: "chat", Status: store.StatusCompleted,
					NodeIDs: []string{"n1", "n2"}, Attempts: 1, CreatedAt: now, AssignedAt: now, FinishedAt: now})
			}
			b.StartTimer()
			if err := w.Flush(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// nullStore takes every batch at once, so that what is measured is the
// Writer's own work.
type nullStore struct{ store.Store }

func (nullStore) WriteTasks(context.Context, []store.TaskRecord) error { return nil }

// BenchmarkWriterFlushNullStore500 is the Writer's own cost for a full
// batch of task records, without a database's noise: queueing, the batch
// copied from the head, written, removed from the queue and the index.
func BenchmarkWriterFlushNullStore500(b *testing.B) {
	w := store.NewWriter(nullStore{}, store.WriterConfig{Logger: quiet})
	now := time.Now()
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%09d", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, id := range ids {
			w.AddTask(store.TaskRecord{ID: id, AccountID: "acct", TaskType: "chat", Status: store.StatusCompleted,
				NodeIDs: []string{"n1", "n2"}, Attempts: 1, CreatedAt: now, AssignedAt: now, FinishedAt: now})
		}
		if err := w.Flush(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
