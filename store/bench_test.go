package store_test

import (
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
