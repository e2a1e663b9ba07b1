// Package streamlogtest is the behavioural suite every streamlog.Log must
// pass. Each implementation's tests call Run with a factory, so Memory and
// Redis (on one server and on a Redis Cluster) are held to one contract.
package streamlogtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/streamlog"
)

// NewLog returns a Log with cfg and no state for the task ids the suite
// uses, and arranges (t.Cleanup) to close it and release what it made.
// Two Logs made for one test must share their state (two instances of a
// cluster); Memory, which cannot, is told by shared=false.
type NewLog func(t *testing.T, cfg streamlog.Config) streamlog.Log

// Run runs the suite; shared says whether two Logs of one test see one
// another's entries (Redis) or not (Memory).
func Run(t *testing.T, newLog NewLog, shared bool) {
	tests := []struct {
		name string
		fn   func(t *testing.T, newLog NewLog)
	}{
		{"NumbersFromOnePerTask", testNumbers},
		{"ReplaysFromTheMiddle", testReplay},
		{"FollowsLive", testFollow},
		{"NoGapBetweenReplayAndLive", testNoGap},
		{"EndClosesTheLog", testEnd},
		{"ReadAtOrPastTheEnd", testReadPastEnd},
		{"ReadWaitsForALogNotWrittenYet", testNotYet},
		{"Limits", testLimits},
		{"ExpiresAfterTTLAndGrace", testExpiry},
		{"ConcurrentAppendersAndReaders", testConcurrent},
		{"ReadEndsWithContextOrCallback", testReadEnds},
		{"CloseEndsReads", testClose},
	}
	if shared {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, newLog NewLog)
		}{"SharedBetweenInstances", testShared})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newLog)
		})
	}
}

const wait = 5 * time.Second // the bound of every wait for an event

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func appendN(t *testing.T, l streamlog.Log, task string, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		seq, err := l.Append(ctxT(t), task, fmt.Sprint("c", i))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if seq != int64(i) {
			t.Fatalf("append %d: seq %d", i, seq)
		}
	}
}

// readAll reads task after after until its end, within the wait bound.
func readAll(t *testing.T, l streamlog.Log, task string, after int64) []streamlog.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), wait)
	defer cancel()
	var got []streamlog.Entry
	if err := l.Read(ctx, task, after, func(e streamlog.Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatalf("read %s after %d: %v (got %d entries)", task, after, err, len(got))
	}
	return got
}

// checkRun checks that got is chunks from..to (data "c<i>") then the end
// entry with final.
func checkRun(t *testing.T, got []streamlog.Entry, from, to int, final string) {
	t.Helper()
	want := to - from + 2
	if len(got) != want {
		t.Fatalf("got %d entries, want %d (chunks %d..%d and the end): %+v", len(got), want, from, to, got)
	}
	for i, e := range got[:len(got)-1] {
		seq := int64(from + i)
		if e.Seq != seq || e.End || e.Data != fmt.Sprint("c", seq) {
			t.Fatalf("entry %d = %+v, want chunk %d", i, e, seq)
		}
	}
	end := got[len(got)-1]
	if !end.End || end.Seq != int64(to+1) || string(end.Final) != final {
		t.Fatalf("last entry = %+v, want the end with seq %d and final %s", end, to+1, final)
	}
}

func testNumbers(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	appendN(t, l, "a", 1, 3)
	appendN(t, l, "b", 1, 2) // another task counts on its own
	appendN(t, l, "a", 4, 4)
}

func testReplay(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	appendN(t, l, "t", 1, 10)
	if err := l.End(ctxT(t), "t", []byte(`{"status":"completed"}`)); err != nil {
		t.Fatal(err)
	}
	checkRun(t, readAll(t, l, "t", 4), 5, 10, `{"status":"completed"}`)
	checkRun(t, readAll(t, l, "t", 0), 1, 10, `{"status":"completed"}`)
	checkRun(t, readAll(t, l, "t", 10), 11, 10, `{"status":"completed"}`) // the end alone
}

// follow starts a reader and returns its entries as they come, and its
// error at the end.
func follow(t *testing.T, l streamlog.Log, task string, after int64) (<-chan streamlog.Entry, <-chan error) {
	entries, done := make(chan streamlog.Entry, 1024), make(chan error, 1)
	ctx, cancel := context.WithTimeout(ctxT(t), 3*wait)
	go func() {
		defer cancel()
		done <- l.Read(ctx, task, after, func(e streamlog.Entry) error { entries <- e; return nil })
	}()
	return entries, done
}

func next(t *testing.T, ch <-chan streamlog.Entry) streamlog.Entry {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(wait):
		t.Fatalf("no entry within %s", wait)
	}
	return streamlog.Entry{}
}

func testFollow(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	appendN(t, l, "t", 1, 2)
	entries, done := follow(t, l, "t", 0)
	for i := 1; i <= 2; i++ {
		if e := next(t, entries); e.Seq != int64(i) {
			t.Fatalf("replayed %+v, want seq %d", e, i)
		}
	}
	for i := 3; i <= 6; i++ { // each live chunk is read before the next is written
		appendN(t, l, "t", i, i)
		if e := next(t, entries); e.Seq != int64(i) || e.Data != fmt.Sprint("c", i) {
			t.Fatalf("followed %+v, want chunk %d", e, i)
		}
	}
	if err := l.End(ctxT(t), "t", []byte(`"done"`)); err != nil {
		t.Fatal(err)
	}
	if e := next(t, entries); !e.End || e.Seq != 7 || string(e.Final) != `"done"` {
		t.Fatalf("followed %+v, want the end at 7", e)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Read after the end = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Read did not return after the end entry")
	}
	if len(entries) != 0 {
		t.Fatalf("entries after the end: %+v", <-entries)
	}
}

// Readers that start while chunks are being written, from every point,
// each get exactly what follows their point: none lost, none twice.
func testNoGap(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	const n = 200
	type reader struct {
		after   int64
		entries <-chan streamlog.Entry
		done    <-chan error
	}
	var readers []reader
	writer := make(chan error, 1)
	go func() {
		for i := 1; i <= n; i++ {
			if _, err := l.Append(context.Background(), "t", fmt.Sprint("c", i)); err != nil {
				writer <- err
				return
			}
		}
		writer <- l.End(context.Background(), "t", []byte(`{}`))
	}()
	for after := int64(0); after <= n; after += 20 {
		e, d := follow(t, l, "t", after)
		readers = append(readers, reader{after, e, d})
	}
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
	for _, r := range readers {
		select {
		case err := <-r.done:
			if err != nil {
				t.Fatalf("reader after %d: %v", r.after, err)
			}
		case <-time.After(wait):
			t.Fatalf("reader after %d did not reach the end", r.after)
		}
		var got []streamlog.Entry
		for len(r.entries) > 0 {
			got = append(got, <-r.entries)
		}
		checkRun(t, got, int(r.after)+1, n, `{}`)
	}
}

func testEnd(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	ctx := ctxT(t)
	appendN(t, l, "t", 1, 1)
	if err := l.End(ctx, "t", []byte("not json")); !errors.Is(err, streamlog.ErrInvalidFinal) {
		t.Fatalf("End with no JSON = %v, want ErrInvalidFinal", err)
	}
	if err := l.End(ctx, "t", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "t", "late"); !errors.Is(err, streamlog.ErrEnded) {
		t.Fatalf("Append after End = %v, want ErrEnded", err)
	}
	if err := l.End(ctx, "t", []byte(`{"a":2}`)); !errors.Is(err, streamlog.ErrEnded) {
		t.Fatalf("a second End = %v, want ErrEnded", err)
	}
	checkRun(t, readAll(t, l, "t", 0), 1, 1, `{"a":1}`)
	// A task that streamed nothing ends at seq 1.
	if err := l.End(ctx, "empty", []byte(`null`)); err != nil {
		t.Fatal(err)
	}
	checkRun(t, readAll(t, l, "empty", 0), 1, 0, `null`)
}

func ended(t *testing.T, l streamlog.Log, task string) int64 {
	t.Helper()
	n, err := l.Ended(ctxT(t), task)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func testReadPastEnd(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	if n := ended(t, l, "t"); n != 0 {
		t.Fatalf("Ended of a log never written = %d, want 0", n)
	}
	appendN(t, l, "t", 1, 3)
	if n := ended(t, l, "t"); n != 0 {
		t.Fatalf("Ended of an open log = %d, want 0", n)
	}
	if err := l.End(ctxT(t), "t", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if n := ended(t, l, "t"); n != 4 {
		t.Fatalf("Ended after 3 chunks and the end = %d, want 4", n)
	}
	for _, after := range []int64{4, 5, 1 << 40} {
		if got := readAll(t, l, "t", after); len(got) != 0 {
			t.Fatalf("read after %d (the end is 4): %+v, want nothing", after, got)
		}
	}
}

func testNotYet(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	entries, done := follow(t, l, "later", 0)
	select {
	case e := <-entries:
		t.Fatalf("an entry of a log never written: %+v", e)
	case err := <-done:
		t.Fatalf("Read of a log never written returned %v; it should wait", err)
	default:
	}
	appendN(t, l, "later", 1, 1)
	if e := next(t, entries); e.Seq != 1 {
		t.Fatalf("got %+v, want seq 1", e)
	}
	if err := l.End(ctxT(t), "later", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	if e := next(t, entries); !e.End {
		t.Fatalf("got %+v, want the end", e)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func testLimits(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{MaxChunks: 3, MaxBytes: 10})
	ctx := ctxT(t)
	appendN(t, l, "count", 1, 3)
	if _, err := l.Append(ctx, "count", "x"); !errors.Is(err, streamlog.ErrLimit) {
		t.Fatalf("a 4th chunk of 3 = %v, want ErrLimit", err)
	}
	if _, err := l.Append(ctx, "bytes", "12345678"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "bytes", "123"); !errors.Is(err, streamlog.ErrLimit) {
		t.Fatalf("11 bytes of 10 = %v, want ErrLimit", err)
	}
	if seq, err := l.Append(ctx, "bytes", "12"); err != nil || seq != 2 {
		t.Fatalf("exactly 10 bytes = %d, %v; want seq 2 (a refused chunk takes no number)", seq, err)
	}
	if err := l.End(ctx, "bytes", []byte(`"12345678901"`)); !errors.Is(err, streamlog.ErrLimit) {
		t.Fatalf("a final of 13 bytes = %v, want ErrLimit", err)
	}
	// The stream is still open, and can end within the bound.
	if err := l.End(ctx, "count", []byte(`{}`)); err != nil {
		t.Fatalf("End after a refused chunk: %v", err)
	}
	checkRun(t, readAll(t, l, "count", 0), 1, 3, `{}`)
}

// gone polls, within the bound, until task's log reads as empty (expired).
// Expiry has no event to wait for: Redis drops the key on its own clock.
func gone(t *testing.T, l streamlog.Log, task string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		n := 0
		err := l.Read(ctx, task, 0, func(streamlog.Entry) error { n++; return nil })
		cancel()
		if n == 0 && errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's log still holds entries after %s (read %d, %v)", task, wait, n, err)
		}
	}
}

func testExpiry(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{TTL: 400 * time.Millisecond, Grace: 200 * time.Millisecond})
	ctx := ctxT(t)
	start := time.Now()
	appendN(t, l, "open", 1, 2)
	appendN(t, l, "ended", 1, 1)
	if err := l.End(ctx, "ended", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	gone(t, l, "ended")
	if n := ended(t, l, "ended"); n != 0 {
		t.Fatalf("Ended of an expired log = %d, want 0", n)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("the ended log went after %s, before its grace of 200ms", d)
	}
	gone(t, l, "open")
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("the open log went after %s, before its TTL of 400ms", d)
	}
	// An expired log is forgotten whole: writing it again starts at 1.
	appendN(t, l, "ended", 1, 1)
}

func testConcurrent(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	const writers, each, readers = 8, 40, 6
	var reads []<-chan streamlog.Entry
	var dones []<-chan error
	for range readers {
		e, d := follow(t, l, "t", 0)
		reads, dones = append(reads, e), append(dones, d)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var seqs []int64
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				seq, err := l.Append(context.Background(), "t", fmt.Sprintf("w%d-%d", w, i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seqs = append(seqs, seq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(seqs)
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("seqs of concurrent appends are not 1..%d: %v", writers*each, seqs)
		}
	}
	if err := l.End(ctxT(t), "t", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for r := range readers {
		if err := waitErr(t, dones[r]); err != nil {
			t.Fatal(err)
		}
		var n int64
		for len(reads[r]) > 0 {
			e := <-reads[r]
			n++
			if e.Seq != n {
				t.Fatalf("reader %d: entry %d has seq %d", r, n, e.Seq)
			}
		}
		if n != writers*each+1 {
			t.Fatalf("reader %d read %d entries, want %d", r, n, writers*each+1)
		}
	}
}

func waitErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(wait):
		t.Fatalf("Read did not return within %s", wait)
	}
	return nil
}

func testReadEnds(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	appendN(t, l, "t", 1, 3)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	got := make(chan int64, 8)
	go func() {
		done <- l.Read(ctx, "t", 0, func(e streamlog.Entry) error { got <- e.Seq; return nil })
	}()
	for range 3 {
		<-got
	}
	cancel() // the reader waits for a 4th chunk
	if err := waitErr(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read after its context ended = %v, want context.Canceled", err)
	}
	stop := errors.New("enough")
	n := 0
	err := l.Read(ctxT(t), "t", 0, func(streamlog.Entry) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Read with a failing callback = %v after %d calls, want its error after 1", err, n)
	}
}

func testClose(t *testing.T, newLog NewLog) {
	l := newLog(t, streamlog.Config{})
	_, done := follow(t, l, "t", 0)
	appendN(t, l, "t", 1, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, done); !errors.Is(err, streamlog.ErrClosed) {
		t.Fatalf("a Read when the log closed = %v, want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := l.Append(context.Background(), "t", "x"); !errors.Is(err, streamlog.ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
}

// Two instances: chunks written at one are read, replayed and followed at
// the other.
func testShared(t *testing.T, newLog NewLog) {
	a, b := newLog(t, streamlog.Config{}), newLog(t, streamlog.Config{})
	appendN(t, a, "t", 1, 4)
	entries, done := follow(t, b, "t", 2)
	appendN(t, a, "t", 5, 6)
	if err := a.End(ctxT(t), "t", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	var got []streamlog.Entry
	for len(entries) > 0 {
		got = append(got, <-entries)
	}
	checkRun(t, got, 3, 6, `{}`)
}
