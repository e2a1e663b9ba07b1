// Package idempotencytest is the behavioural suite every
// idempotency.Store must pass: what the server's Idempotency-Key relies
// on, whoever keeps the records.
package idempotencytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/idempotency"
)

// Impl is one implementation under test.
type Impl struct {
	// New returns an empty store for one test (a namespace of its own)
	// with cfg.
	New func(t *testing.T, cfg idempotency.Config) idempotency.Store
	// Pass lets d go by on the store's clock: the Memory store's is the
	// suite's to move; Redis's is its own (key expiry), so Pass waits d
	// there, and the suite then waits, bounded, for what it expects.
	Pass func(d time.Duration)
}

// Run runs the suite against impl.
func Run(t *testing.T, impl Impl) {
	t.Run("ClaimCompleteReplay", func(t *testing.T) { testClaimCompleteReplay(t, impl) })
	t.Run("Mismatch", func(t *testing.T) { testMismatch(t, impl) })
	t.Run("OneClaimUnderConcurrency", func(t *testing.T) { testConcurrency(t, impl) })
	t.Run("ScopesAreApart", func(t *testing.T) { testScopes(t, impl) })
	t.Run("ReleaseFreesTheKey", func(t *testing.T) { testRelease(t, impl) })
	t.Run("WaitGetsTheAnswer", func(t *testing.T) { testWaitAnswer(t, impl) })
	t.Run("WaitEndsOnRelease", func(t *testing.T) { testWaitRelease(t, impl) })
	t.Run("LeaseLapsesUnlessRenewed", func(t *testing.T) { testLease(t, impl) })
	t.Run("MaxKeysPerScope", func(t *testing.T) { testMaxKeys(t, impl) })
	t.Run("AnswerBounds", func(t *testing.T) { testBounds(t, impl) })
	t.Run("BadScope", func(t *testing.T) { testBadScope(t, impl) })
}

var ctx = context.Background()

func begin(t *testing.T, s idempotency.Store, scope, key, fp string, want idempotency.Kind) idempotency.State {
	t.Helper()
	st, err := s.Begin(ctx, scope, key, fp)
	if err != nil {
		t.Fatalf("Begin(%s, %s, %s): %v", scope, key, fp, err)
	}
	if st.Kind != want {
		t.Fatalf("Begin(%s, %s, %s): %v, want %v", scope, key, fp, st.Kind, want)
	}
	return st
}

func answer(body string) idempotency.Answer {
	return idempotency.Answer{Status: 200, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(body)}
}

func sameAnswer(t *testing.T, got, want idempotency.Answer) {
	t.Helper()
	if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || fmt.Sprint(got.Header) != fmt.Sprint(want.Header) {
		t.Fatalf("answer %d %v %q, want %d %v %q", got.Status, got.Header, got.Body, want.Status, want.Header, want.Body)
	}
}

func testClaimCompleteReplay(t *testing.T, impl Impl) {
	s := impl.New(t, idempotency.Config{})
	st := begin(t, s, "acct", "k1", "fp1", idempotency.Claimed)
	if st.Token == "" {
		t.Fatal("a claim without a token")
	}
	begin(t, s, "acct", "k1", "fp1", idempotency.Running)
	// Every byte, binary ones too, comes back as it went.
	a := idempotency.Answer{Status: 502, Header: map[string]string{"Content-Type": "text/event-stream", "Location": "/x"},
		Body: []byte("data: {\"x\":1}\n\n\x00\xff")}
	if err := s.Renew(ctx, "acct", "k1", st.Token); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := s.Complete(ctx, "acct", "k1", st.Token, a); err != nil {
		t.Fatalf("complete: %v", err)
	}
	got := begin(t, s, "acct", "k1", "fp1", idempotency.Done)
	sameAnswer(t, got.Answer, a)
	// Done, the claim is no longer held.
	if err := s.Complete(ctx, "acct", "k1", st.Token, a); !errors.Is(err, idempotency.ErrNotHeld) {
		t.Fatalf("second complete: %v, want ErrNotHeld", err)
	}
	if err := s.Renew(ctx, "acct", "k1", st.Token); !errors.Is(err, idempotency.ErrNotHeld) {
		t.Fatalf("renew after complete: %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, "acct", "k1", st.Token); err != nil {
		t.Fatalf("release after complete: %v", err)
	}
	begin(t, s, "acct", "k1", "fp1", idempotency.Done) // a release of a finished claim keeps its answer
	// A stranger's token holds nothing.
	st2 := begin(t, s, "acct", "k2", "fp", idempotency.Claimed)
	if err := s.Complete(ctx, "acct", "k2", "not-"+st2.Token, answer("x")); !errors.Is(err, idempotency.ErrNotHeld) {
		t.Fatalf("complete with another token: %v, want ErrNotHeld", err)
	}
}

func testMismatch(t *testing.T, impl Impl) {
	s := impl.New(t, idempotency.Config{})
	st := begin(t, s, "acct", "k", "fp1", idempotency.Claimed)
	begin(t, s, "acct", "k", "fp2", idempotency.Mismatch) // while it runs
	if err := s.Complete(ctx, "acct", "k", st.Token, answer("{}")); err != nil {
		t.Fatal(err)
	}
	begin(t, s, "acct", "k", "fp2", idempotency.Mismatch) // and once done
	begin(t, s, "acct", "k", "fp1", idempotency.Done)
}

func testConcurrency(t *testing.T, impl Impl) {
	s := impl.New(t, idempotency.Config{})
	var mu sync.Mutex
	kinds := map[idempotency.Kind]int{}
	tokens := map[string]bool{}
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			st, err := s.Begin(ctx, "acct", "race", "fp")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			kinds[st.Kind]++
			tokens[st.Token] = true
		})
	}
	wg.Wait()
	if kinds[idempotency.Claimed] != 1 || kinds[idempotency.Running] != 39 || len(tokens) != 1 {
		t.Fatalf("40 concurrent begins: %v with %d tokens; want 1 claimed, 39 running, one token", kinds, len(tokens))
	}
}

func testScopes(t *testing.T, impl Impl) {
	s := impl.New(t, idempotency.Config{})
	a := begin(t, s, "acct-a", "k", "fp-a", idempotency.Claimed)
	b := begin(t, s, "acct-b", "k", "fp-b", idempotency.Claimed) // another account's same key is unrelated
	if err := s.Complete(ctx, "acct-a", "k", a.Token, answer("a")); err != nil {
		t.Fatal(err)
	}
	begin(t, s, "acct-b", "k", "fp-b", idempotency.Running)
	if err := s.Complete(ctx, "acct-b", "k", b.Token, answer("b")); err != nil {
		t.Fatal(err)
	}
	sameAnswer(t, begin(t, s, "acct-a", "k", "fp-a", idempotency.Done).Answer, answer("a"))
	sameAnswer(t, begin(t, s, "acct-b", "k", "fp-b", idempotency.Done).Answer, answer("b"))
	if err := s.Complete(ctx, "acct-b", "k", a.Token, answer("x")); !errors.Is(err, idempotency.ErrNotHeld) {
		t.Fatalf("a's token completing b's key: %v, want ErrNotHeld", err)
	}
}

func testRelease(t *testing.T, impl Impl) {
	s := impl.New(t, idempotency.Config{})
	st := begin(t, s, "acct", "k", "fp1", idempotency.Claimed)
	if err := s.Release(ctx, "acct", "k", "not-"+st.Token); err != nil {
		t.Fatal(err)
	}
	begin(t, s, "acct", "k", "fp1", idempotency.Running) // a stranger's release did nothing
	if err := s.Release(ctx, "acct", "k", st.Token); err != nil {
		t.Fatal(err)
	}
	// Free again, for any request.
	begin(t, s, "acct", "k", "fp2", idempotency.Claimed)
	if err := s.Renew(ctx, "acct", "k", st.Token); !errors.Is(err, idempotency.ErrNotHeld) {
		t.Fatalf("renew of a released claim: %v, want ErrNotHeld", err)
	}
}

func wait(s idempotency.Store, scope, key, fp, token string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := s.Wait(ctx, scope, key, fp, token)
		ch <- err
	}()
	return ch
}

func testWaitAnswer(t *testing.T, impl Impl) {
	s := impl.New(t, idempotency.Config{})
	st := begin(t, s, "acct", "k", "fp", idempotency.Claimed)
	got := make(chan idempotency.Answer, 1)
	go func() {
		a, err := s.Wait(ctx, "acct", "k", "fp", st.Token)
		if err != nil {
			t.Error(err)
		}
		got <- a
	}()
	if err := s.Complete(ctx, "acct", "k", st.Token, answer("done")); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		sameAnswer(t, a, answer("done"))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the answer")
	}
	// A wait that ends with its context.
	st2 := begin(t, s, "acct", "k2", "fp", idempotency.Claimed)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Wait(cctx, "acct", "k2", "fp", st2.Token); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with an ended context: %v", err)
	}
}

func testWaitRelease(t *testing.T, impl Impl) {
	s := impl.New(t, idempotency.Config{})
	st := begin(t, s, "acct", "k", "fp", idempotency.Claimed)
	ch := wait(s, "acct", "k", "fp", st.Token)
	if err := s.Release(ctx, "acct", "k", st.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ch:
		if !errors.Is(err, idempotency.ErrReleased) {
			t.Fatalf("wait after a release: %v, want ErrReleased", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not notice the release")
	}
	// A key taken since by another request is not the claim waited for.
	st2 := begin(t, s, "acct", "k", "fp2", idempotency.Claimed)
	if _, err := s.Wait(ctx, "acct", "k", "fp", st.Token); !errors.Is(err, idempotency.ErrReleased) {
		t.Fatalf("wait on a key another request holds: %v, want ErrReleased", err)
	}
	_ = st2
}

// eventually polls cond for up to 10 s: Redis's clock is its own.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testLease(t *testing.T, impl Impl) {
	const lease = 300 * time.Millisecond
	s := impl.New(t, idempotency.Config{Lease: lease})
	// A holder that renews keeps its claim past several leases.
	st := begin(t, s, "acct", "kept", "fp", idempotency.Claimed)
	for range 5 {
		impl.Pass(lease / 2)
		if err := s.Renew(ctx, "acct", "kept", st.Token); err != nil {
			t.Fatalf("renew: %v", err)
		}
	}
	begin(t, s, "acct", "kept", "fp", idempotency.Running)

	// One that does not (it died) loses it: a waiter is told, and the key
	// is free for the next request.
	dead := begin(t, s, "acct", "dead", "fp", idempotency.Claimed)
	ch := wait(s, "acct", "dead", "fp", dead.Token)
	impl.Pass(2 * lease)
	select {
	case err := <-ch:
		if !errors.Is(err, idempotency.ErrReleased) {
			t.Fatalf("wait on a lapsed claim: %v, want ErrReleased", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter of a lapsed claim still waits")
	}
	eventually(t, "the lapsed key claimed again", func() bool {
		st, err := s.Begin(ctx, "acct", "dead", "fp")
		return err == nil && st.Kind == idempotency.Claimed
	})
	if err := s.Renew(ctx, "acct", "dead", dead.Token); !errors.Is(err, idempotency.ErrNotHeld) {
		t.Fatalf("renew of a lapsed claim: %v, want ErrNotHeld", err)
	}
}

func testMaxKeys(t *testing.T, impl Impl) {
	const ttl = time.Hour
	s := impl.New(t, idempotency.Config{MaxKeys: 3, TTL: ttl})
	var sts []idempotency.State
	for i := range 3 {
		sts = append(sts, begin(t, s, "acct", fmt.Sprint("k", i), "fp", idempotency.Claimed))
	}
	begin(t, s, "acct", "k3", "fp", idempotency.Full)
	begin(t, s, "other", "k3", "fp", idempotency.Claimed) // the bound is per scope
	// A key already held is looked at, not counted again.
	begin(t, s, "acct", "k0", "fp", idempotency.Running)
	if err := s.Complete(ctx, "acct", "k0", sts[0].Token, answer("0")); err != nil {
		t.Fatal(err)
	}
	begin(t, s, "acct", "k0", "fp", idempotency.Done)
	begin(t, s, "acct", "k3", "fp", idempotency.Full) // an answer kept still counts
	// A released key leaves the count at once.
	if err := s.Release(ctx, "acct", "k1", sts[1].Token); err != nil {
		t.Fatal(err)
	}
	begin(t, s, "acct", "k3", "fp", idempotency.Claimed)
	begin(t, s, "acct", "k4", "fp", idempotency.Full)
}

func testBounds(t *testing.T, impl Impl) {
	s := impl.New(t, idempotency.Config{MaxAnswerBytes: 100})
	st := begin(t, s, "acct", "k", "fp", idempotency.Claimed)
	over := []idempotency.Answer{
		{Status: 200, Body: bytes.Repeat([]byte("x"), 101)},
		{Status: 0, Body: []byte("x")},
		{Status: 200, Header: map[string]string{"content-type": "x"}}, // not canonical
		{Status: 200, Header: map[string]string{"X-Big": string(bytes.Repeat([]byte("v"), idempotency.MaxHeaderBytes))}},
	}
	many := map[string]string{}
	for i := range idempotency.MaxHeaders + 1 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	over = append(over, idempotency.Answer{Status: 200, Header: many})
	for _, a := range over {
		if err := s.Complete(ctx, "acct", "k", st.Token, a); !errors.Is(err, idempotency.ErrTooLarge) {
			t.Fatalf("complete with %d headers, %d bytes, status %d: %v, want ErrTooLarge", len(a.Header), len(a.Body), a.Status, err)
		}
	}
	// At the cap exactly, it is kept.
	at := idempotency.Answer{Status: 200, Body: bytes.Repeat([]byte("y"), 100)}
	if err := s.Complete(ctx, "acct", "k", st.Token, at); err != nil {
		t.Fatalf("complete at the cap: %v", err)
	}
	sameAnswer(t, begin(t, s, "acct", "k", "fp", idempotency.Done).Answer, at)
}

func testBadScope(t *testing.T, impl Impl) {
	s := impl.New(t, idempotency.Config{})
	for _, scope := range []string{"", "a{b", "a}b"} {
		if _, err := s.Begin(ctx, scope, "k", "fp"); !errors.Is(err, idempotency.ErrBadScope) {
			t.Fatalf("scope %q: %v, want ErrBadScope", scope, err)
		}
	}
}
