package store

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
)

// A suspension PostgreSQL refuses (a node id too long for node_stats' key)
// is set aside like a record, and does not hold up the flush, or the
// suspensions queued beside it, at every round.
func TestWriterSetsAsideARefusedSuspension(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := Open(ctx, Options{DatabaseURL: pgtest.SchemaURL(t, "sytest"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w := NewWriter(st, WriterConfig{FlushInterval: time.Hour, Logger: log})
	until := time.Now().Add(time.Hour)
	// Random letters: a repeated one would compress to fit the index.
	r := rand.New(rand.NewPCG(36, 17))
	id := make([]byte, 9000)
	for i := range id {
		id[i] = 'a' + byte(r.IntN(26))
	}
	w.addSuspension(string(id), until)
	w.addSuspension("n-good", until)
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v; want the refused suspension set aside", err)
	}
	stats, err := st.NodeStats(ctx, []string{"n-good"})
	if err != nil {
		t.Fatal(err)
	}
	if s := stats["n-good"].SuspendedUntil; s == nil || !s.Equal(until.UTC().Truncate(time.Microsecond)) {
		t.Errorf("n-good suspended until %v, want %v", s, until)
	}
	dls, total, err := st.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if total != 1 || dls[0].Kind != KindSuspension || !strings.Contains(dls[0].Error, "SQLSTATE 54000") ||
		!strings.HasPrefix(dls[0].Record, `{"node_id":"`+string(id[:100])) {
		t.Fatalf("dead letters = %+v, want the refused suspension", dls)
	}
	w.mu.Lock()
	left := len(w.susp)
	w.mu.Unlock()
	if left != 0 {
		t.Errorf("%d suspensions still queued, want none", left)
	}
}
