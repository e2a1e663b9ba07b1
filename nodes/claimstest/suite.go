// Package claimstest is the behavioural suite every nodes.Claims
// implementation must pass (invariant 1): what the hub relies
// on, whoever keeps the claims. Implementation details (Redis scripts and
// keys, compare-and-set races) are tested beside each implementation.
package claimstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/nodes"
)

// Impl is one implementation under test.
type Impl struct {
	// New returns empty claims for one test, under a namespace of their
	// own. ttl is how long a claim lives unrefreshed; implementations whose
	// claims never lapse ignore it.
	New func(t *testing.T, ttl time.Duration) nodes.Claims
	// Lapses is true when a claim that is not refreshed within its ttl
	// lapses (Redis: its instance may have died). MemoryClaims' do not:
	// their one instance releases each claim itself.
	Lapses bool
}

// Run runs the suite against impl.
func Run(t *testing.T, impl Impl) {
	t.Run("FirstClaim", func(t *testing.T) { testFirstClaim(t, impl) })
	t.Run("ReconnectTakesOver", func(t *testing.T) { testReconnect(t, impl) })
	t.Run("StaleRefreshFails", func(t *testing.T) { testStaleRefresh(t, impl) })
	t.Run("Release", func(t *testing.T) { testRelease(t, impl) })
	t.Run("CapUnderConcurrency", func(t *testing.T) { testCap(t, impl) })
	t.Run("Expiry", func(t *testing.T) { testExpiry(t, impl) })
}

const long = time.Minute // a ttl no test outlives

func held(node, acct string, gen uint64) nodes.Held {
	return nodes.Held{NodeID: node, AccountID: acct, Gen: gen}
}

func testFirstClaim(t *testing.T, impl Impl) {
	c := impl.New(t, long)
	ctx := context.Background()
	got, err := c.Claim(ctx, "i1", "n1", "acct", 5)
	if err != nil || got.Gen != 1 || got.PrevOwner != "" || got.PrevGen != 0 {
		t.Fatalf("first claim of n1: %+v, %v; want generation 1 and no previous owner", got, err)
	}
	// Generations are per node.
	got, err = c.Claim(ctx, "i1", "n2", "acct", 5)
	if err != nil || got.Gen != 1 || got.PrevOwner != "" {
		t.Fatalf("first claim of n2: %+v, %v; want generation 1 and no previous owner", got, err)
	}
	if lost, err := c.Refresh(ctx, "i1", []nodes.Held{held("n1", "acct", 1), held("n2", "acct", 1)}); err != nil || len(lost) != 0 {
		t.Fatalf("refresh of fresh claims: lost %v, %v", lost, err)
	}
}

func testReconnect(t *testing.T, impl Impl) {
	c := impl.New(t, long)
	ctx := context.Background()
	first, err := c.Claim(ctx, "i1", "n1", "acct", 1)
	if err != nil {
		t.Fatal(err)
	}
	// At another instance: a higher generation, naming the one it displaced;
	// the node is counted once against the cap of 1.
	second, err := c.Claim(ctx, "i2", "n1", "acct", 1)
	if err != nil || second.Gen <= first.Gen || second.PrevOwner != "i1" || second.PrevGen != first.Gen {
		t.Fatalf("reconnect at i2: %+v, %v; want a generation above %d, previous owner i1 at %d", second, err, first.Gen, first.Gen)
	}
	// At the same instance again: the hub compares PrevOwner with itself to
	// know the replaced socket is its own.
	third, err := c.Claim(ctx, "i2", "n1", "acct", 1)
	if err != nil || third.Gen <= second.Gen || third.PrevOwner != "i2" || third.PrevGen != second.Gen {
		t.Fatalf("reconnect at i2 again: %+v, %v; want a generation above %d, previous owner i2 at %d", third, err, second.Gen, second.Gen)
	}
}

func testStaleRefresh(t *testing.T, impl Impl) {
	c := impl.New(t, long)
	ctx := context.Background()
	old, err := c.Claim(ctx, "i1", "n1", "acct", 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "i1", "other", "acct", 5); err != nil {
		t.Fatal(err)
	}
	cur, err := c.Claim(ctx, "i2", "n1", "acct", 5)
	if err != nil {
		t.Fatal(err)
	}
	// i1's socket of n1 is stale: its refresh reports exactly that claim
	// lost, and keeps its others.
	stale := held("n1", "acct", old.Gen)
	lost, err := c.Refresh(ctx, "i1", []nodes.Held{held("other", "acct", 1), stale})
	if err != nil || len(lost) != 1 || lost[0] != stale {
		t.Fatalf("refresh by the displaced owner: lost %v, %v; want only %v", lost, err, stale)
	}
	if lost, err := c.Refresh(ctx, "i2", []nodes.Held{held("n1", "acct", cur.Gen)}); err != nil || len(lost) != 0 {
		t.Fatalf("refresh by the new owner: lost %v, %v", lost, err)
	}
	// The same instance's older generation is stale too.
	newer, err := c.Claim(ctx, "i2", "n1", "acct", 5)
	if err != nil {
		t.Fatal(err)
	}
	if lost, err := c.Refresh(ctx, "i2", []nodes.Held{held("n1", "acct", cur.Gen)}); err != nil || len(lost) != 1 {
		t.Fatalf("refresh of generation %d after %d took over at the same instance: lost %v, %v", cur.Gen, newer.Gen, lost, err)
	}
}

func testRelease(t *testing.T, impl Impl) {
	c := impl.New(t, long)
	ctx := context.Background()
	old, err := c.Claim(ctx, "i1", "n1", "acct", 1)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := c.Claim(ctx, "i2", "n1", "acct", 1)
	if err != nil {
		t.Fatal(err)
	}
	// The displaced socket closes and releases its claim: the newer one
	// stays, holding the node's place under the cap.
	if err := c.Release(ctx, "i1", held("n1", "acct", old.Gen)); err != nil {
		t.Fatal(err)
	}
	if lost, err := c.Refresh(ctx, "i2", []nodes.Held{held("n1", "acct", cur.Gen)}); err != nil || len(lost) != 0 {
		t.Fatalf("a stale release took the current claim: lost %v, %v", lost, err)
	}
	if _, err := c.Claim(ctx, "i1", "n2", "acct", 1); !errors.Is(err, nodes.ErrTooManyNodes) {
		t.Fatalf("a stale release freed the node's place under the cap: claim of n2 = %v", err)
	}
	// Releasing the current claim frees the node and its place.
	if err := c.Release(ctx, "i2", held("n1", "acct", cur.Gen)); err != nil {
		t.Fatal(err)
	}
	n2, err := c.Claim(ctx, "i1", "n2", "acct", 1)
	if err != nil {
		t.Fatalf("claim of n2 after n1 was released (cap 1): %v", err)
	}
	if err := c.Release(ctx, "i1", held("n2", "acct", n2.Gen)); err != nil {
		t.Fatal(err)
	}
	again, err := c.Claim(ctx, "i3", "n1", "acct", 1)
	if err != nil || again.Gen <= cur.Gen || again.PrevOwner != "" {
		t.Fatalf("claim of n1 after release: %+v, %v; want a generation above %d (they only grow) and no previous owner", again, err, cur.Gen)
	}
}

func testCap(t *testing.T, impl Impl) {
	c := impl.New(t, long)
	ctx := context.Background()
	const limit, tries = 5, 12
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		refused int
	)
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", i)
			_, err := c.Claim(ctx, fmt.Sprintf("i%d", i%3), node, "acct", limit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, node)
			case errors.Is(err, nodes.ErrTooManyNodes):
				refused++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != limit || refused != tries-limit {
		t.Fatalf("%d concurrent claims of distinct nodes, cap %d: %d won, %d refused", tries, limit, len(winners), refused)
	}
	// A winner reconnecting (elsewhere) at the cap is not a new node.
	if _, err := c.Claim(ctx, "i-other", winners[0], "acct", limit); err != nil {
		t.Fatalf("reconnect of %s at the cap: %v", winners[0], err)
	}
	// The cap is per account.
	if _, err := c.Claim(ctx, "i1", "m0", "acct-2", limit); err != nil {
		t.Fatalf("another account's first node: %v", err)
	}
}

func testExpiry(t *testing.T, impl Impl) {
	if !impl.Lapses {
		t.Skip("this implementation's claims do not lapse: their instance releases them, or the sweeper purges a dead instance's")
	}
	const ttl = 300 * time.Millisecond
	c := impl.New(t, ttl)
	ctx := context.Background()
	first, err := c.Claim(ctx, "i1", "n1", "acct", 1)
	if err != nil {
		t.Fatal(err)
	}
	// Refreshed, a claim outlives its ttl: the cap stays taken.
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); {
		if lost, err := c.Refresh(ctx, "i1", []nodes.Held{held("n1", "acct", first.Gen)}); err != nil || len(lost) != 0 {
			t.Fatalf("refresh: lost %v, %v", lost, err)
		}
		time.Sleep(ttl / 5) // the refresh cadence under test; there is no event to wait for
	}
	if _, err := c.Claim(ctx, "i2", "n2", "acct", 1); !errors.Is(err, nodes.ErrTooManyNodes) {
		t.Fatalf("a refreshed claim lapsed: claim of n2 at the cap = %v", err)
	}
	// Left alone (its instance died), it lapses: its place under the cap
	// frees up, so another node of the account can come in.
	deadline := time.Now().Add(10 * ttl)
	for {
		_, err := c.Claim(ctx, "i2", "n2", "acct", 1)
		if err == nil {
			break
		}
		if !errors.Is(err, nodes.ErrTooManyNodes) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("an unrefreshed claim (ttl %s) still held its place after %s", ttl, 10*ttl)
		}
		time.Sleep(ttl / 10) // waiting out a ttl: there is no event
	}
	// And the lapsed node is free to claim, with no owner left to replace.
	got, err := c.Claim(ctx, "i3", "n1", "acct", 2)
	if err != nil || got.Gen <= first.Gen || got.PrevOwner != "" {
		t.Fatalf("claim of the lapsed n1: %+v, %v; want a generation above %d and no previous owner", got, err, first.Gen)
	}
	if lost, err := c.Refresh(ctx, "i1", []nodes.Held{held("n1", "acct", first.Gen)}); err != nil || len(lost) != 1 {
		t.Fatalf("refresh of the lapsed claim after another took the node: lost %v, %v", lost, err)
	}
}
