package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

const workers = 20

// parallel runs fn in workers goroutines and reports every error.
func parallel(t *testing.T, fn func(i int) error) []error {
	t.Helper()
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range workers {
		wg.Go(func() {
			<-start // release together, to make collisions likely
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

func testConcurrentKeys(t *testing.T, st store.Store) {
	c := ctx(t)
	const perWorker = 5
	accounts := make([]store.Account, 4)
	for i := range accounts {
		accounts[i], _ = newAccount(t, st, fmt.Sprintf("acct-%d", i))
	}
	var mu sync.Mutex
	keys := map[string]string{} // key -> account
	keyIDs := map[string]bool{}
	errs := parallel(t, func(i int) error {
		acct := accounts[i%len(accounts)]
		for range perWorker {
			k, key, err := st.CreateKey(c, acct.ID)
			if err != nil {
				return err
			}
			mu.Lock()
			if _, dup := keys[key]; dup || keyIDs[k.ID] {
				mu.Unlock()
				return fmt.Errorf("duplicate key or key id %s", k.ID)
			}
			keys[key], keyIDs[k.ID] = acct.ID, true
			mu.Unlock()
		}
		return nil
	})
	for _, err := range errs {
		noErr(t, err, "concurrent CreateKey")
	}
	if len(keys) != workers*perWorker {
		t.Fatalf("%d distinct keys, want %d", len(keys), workers*perWorker)
	}
	for key, acct := range keys {
		got, err := st.Authenticate(c, key)
		noErr(t, err, "Authenticate")
		if got.ID != acct {
			t.Fatalf("key of %s authenticates %s", acct, got.ID)
		}
	}
	all, err := st.ListKeys(c, "")
	noErr(t, err, "ListKeys")
	if want := workers*perWorker + len(accounts); len(all) != want {
		t.Errorf("ListKeys = %d keys, want %d", len(all), want)
	}
}

func testConcurrentSameName(t *testing.T, st store.Store) {
	c := ctx(t)
	errs := parallel(t, func(int) error {
		_, _, err := st.CreateAccount(c, "popular", "", "")
		return err
	})
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("concurrent CreateAccount: %v, want nil or ErrConflict", err)
		}
	}
	if won != 1 {
		t.Errorf("%d concurrent creations of one name succeeded, want 1", won)
	}
}

func testConcurrentWriteTasks(t *testing.T, st store.Store) {
	c := ctx(t)
	now := time.Now()
	// Each worker writes 25 tasks of its own and the same 25 shared ones, so
	// the batches overlap on purpose.
	errs := parallel(t, func(i int) error {
		var recs []store.TaskRecord
		for j := range 25 {
			recs = append(recs, fullRecord(fmt.Sprintf("own-%d-%d", i, j), "acct", now))
			recs = append(recs, fullRecord(fmt.Sprintf("shared-%d", j), "acct", now))
		}
		return st.WriteTasks(c, recs)
	})
	for _, err := range errs {
		noErr(t, err, "concurrent WriteTasks")
	}
	n, err := st.CountCompletedSince(c, now.Add(-time.Minute))
	noErr(t, err, "CountCompletedSince")
	if want := int64(workers*25 + 25); n != want {
		t.Errorf("%d tasks stored, want %d", n, want)
	}
}

func testConcurrentApplyOutcomes(t *testing.T, st store.Store) {
	c := ctx(t)
	nodes := []string{"n3", "n1", "n2"}
	errs := parallel(t, func(i int) error {
		var outs []store.Outcome
		// Different orders per worker: lock ordering must prevent deadlock.
		for j := range 10 {
			outs = append(outs, store.Outcome{NodeID: nodes[(i+j)%len(nodes)], Success: j%2 == 0, ElapsedMs: 10, At: time.Now()})
		}
		return st.ApplyOutcomes(c, outs)
	})
	for _, err := range errs {
		noErr(t, err, "concurrent ApplyOutcomes")
	}
	m, err := st.NodeStats(c, nodes)
	noErr(t, err, "NodeStats")
	var total, ok, ms int64
	for _, s := range m {
		total += s.TotalTasks
		ok += s.SuccessfulTasks
		ms += s.TotalMs
	}
	if total != workers*10 || ok != workers*5 || ms != workers*100 {
		t.Errorf("totals %d tasks, %d successful, %d ms; want %d, %d, %d (no lost update)",
			total, ok, ms, workers*10, workers*5, workers*100)
	}
}

func testConcurrentRate(t *testing.T, st store.Store) {
	c := ctx(t)
	a, _ := newAccount(t, st, "eager")
	now := time.Now()
	noErr(t, st.WriteTasks(c, []store.TaskRecord{taskFor(a.ID, []string{"n1", "n2"}, store.StatusCompleted, now, "t")}), "WriteTasks")
	errs := parallel(t, func(i int) error {
		_, err := st.Rate(c, "t", a.ID, 1+i%5, now)
		return err
	})
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("concurrent Rate: %v, want nil or ErrConflict", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d concurrent ratings of one task succeeded, want 1", won)
	}
	for _, id := range []string{"n1", "n2"} {
		if s := nodeStats(t, st, id); s.RatingCount != 1 {
			t.Errorf("%s has %d ratings, want 1", id, s.RatingCount)
		}
	}
}
