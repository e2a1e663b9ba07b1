package nodes

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/redistest"
)

func redisClaims(t *testing.T, ttl time.Duration) *RedisClaims {
	return NewRedisClaims(redistest.Client(t), RedisClaimsConfig{Namespace: redistest.Namespace(t), TTL: ttl})
}

// Two concurrent compare-and-sets on the same generation: one wins, one loses.
func TestRedisClaimsCompareAndSet(t *testing.T) {
	c := redisClaims(t, time.Minute)
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		node := fmt.Sprintf("n%d", round)
		var wg sync.WaitGroup
		results := make(chan bool, 2)
		for _, inst := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				won, _, _, err := c.CompareAndClaim(ctx, inst, node, 0)
				if err != nil {
					t.Error(err)
				}
				results <- won
			}()
		}
		wg.Wait()
		close(results)
		wins := 0
		for w := range results {
			if w {
				wins++
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d of 2 concurrent claims on generation 0 won", round, wins)
		}
	}
	won, gen, _, err := c.CompareAndClaim(ctx, "a", "n0", 0)
	if err != nil || won || gen != 1 {
		t.Fatalf("a claim at a stale generation: won %v, current %d, %v", won, gen, err)
	}
}

// The owner key says which connection holds the node, as docs/OPERATIONS.md shows
// operators: "<instance>:<gen>", untouched by a stale release, gone after
// the current one. (What the hub relies on is in claimstest.)
func TestRedisClaimsOwnerKey(t *testing.T) {
	c := redisClaims(t, time.Minute)
	ctx := context.Background()
	if _, err := c.Claim(ctx, "i1", "node", "acct", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "i2", "node", "acct", 5); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "i1", Held{NodeID: "node", AccountID: "acct", Gen: 1}); err != nil {
		t.Fatal(err)
	}
	if owner, _ := c.rdb.Get(ctx, c.OwnerKey("node")).Result(); owner != "i2:2" {
		t.Fatalf("owner after a stale release: %q, want i2:2", owner)
	}
	if err := c.Release(ctx, "i2", Held{NodeID: "node", AccountID: "acct", Gen: 2}); err != nil {
		t.Fatal(err)
	}
	if n := c.rdb.Exists(ctx, c.OwnerKey("node")).Val(); n != 0 {
		t.Fatal("owner key left after release")
	}
}

// Claims live as long as their instance (invariant 12): no TTL on the
// owner key or the account's entries, so nothing is refreshed per node
// while idle. If Redis loses a claim (a restart), the owner's re-assertion
// takes it back; if a newer connection took it meanwhile, the re-assertion
// reports it lost.
func TestRedisClaimsNoExpiryAndReassert(t *testing.T) {
	c := redisClaims(t, 0)
	ctx := context.Background()
	if _, err := c.Claim(ctx, "i1", "node", "acct", 1); err != nil {
		t.Fatal(err)
	}
	if ttl := c.rdb.PTTL(ctx, c.OwnerKey("node")).Val(); ttl != -1 {
		t.Fatalf("owner key TTL %v, want none", ttl)
	}
	if ttl := c.rdb.PTTL(ctx, c.AccountKey("acct")).Val(); ttl != -1 {
		t.Fatalf("account key TTL %v, want none", ttl)
	}
	if v := c.rdb.HGet(ctx, c.AccountKey("acct"), "node").Val(); v != "i1:1|0" {
		t.Fatalf("account entry %q, want no expiry", v)
	}
	// Redis lost the claim and nobody took it: the owner re-takes it.
	c.rdb.Del(ctx, c.OwnerKey("node"), c.AccountKey("acct"), c.instanceKey("i1"))
	if lost, err := c.Refresh(ctx, "i1", []Held{{NodeID: "node", AccountID: "acct", Gen: 1}}); err != nil || len(lost) != 0 {
		t.Fatalf("re-assert after a loss: lost %v, %v", lost, err)
	}
	if owner := c.rdb.Get(ctx, c.OwnerKey("node")).Val(); owner != "i1:1" {
		t.Fatalf("owner after re-taking: %q", owner)
	}
	if !c.rdb.HExists(ctx, c.AccountKey("acct"), "node").Val() || c.rdb.SCard(ctx, c.instanceKey("i1")).Val() != 1 {
		t.Fatal("re-assertion did not put back the account entry and the instance's claim set")
	}
	// A newer connection elsewhere: the old owner's re-assertion loses.
	if _, err := c.Claim(ctx, "i2", "node", "acct", 1); err != nil {
		t.Fatal(err)
	}
	if lost, err := c.Refresh(ctx, "i1", []Held{{NodeID: "node", AccountID: "acct", Gen: 1}}); err != nil || len(lost) != 1 {
		t.Fatalf("re-assert of a claim taken over: lost %v, %v", lost, err)
	}
}

// Under concurrent claims at the cap (the suite checks the count), a
// refused claim leaves no owner key behind: the owner key and the account
// entry agree for every node.
func TestRedisClaimsRefusedLeavesNoOwner(t *testing.T) {
	c := redisClaims(t, time.Minute)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Claim(ctx, fmt.Sprintf("inst-%d", i%3), fmt.Sprintf("node-%d", i), "acct", 5)
			if err != nil && !errors.Is(err, ErrTooManyNodes) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	owners := 0
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("node-%d", i)
		owned := c.rdb.Exists(ctx, c.OwnerKey(id)).Val() == 1
		if c.rdb.HExists(ctx, c.AccountKey("acct"), id).Val() != owned {
			t.Fatalf("%s: owner key and account entry disagree", id)
		}
		if owned {
			owners++
		}
	}
	if owners != 5 {
		t.Fatalf("%d owner keys after 12 concurrent claims at a cap of 5", owners)
	}
}

func TestRedisClaimsPurge(t *testing.T) {
	c := redisClaims(t, time.Minute)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := c.Claim(ctx, "dead", fmt.Sprintf("n%d", i), "acct", 3); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Claim(ctx, "alive", "n0", "acct", 3); err != nil { // n0 moved on
		t.Fatal(err)
	}
	if err := c.Purge(ctx, "dead"); err != nil {
		t.Fatal(err)
	}
	if c.rdb.Get(ctx, c.OwnerKey("n0")).Val() != "alive:2" {
		t.Fatal("purge removed a claim the dead instance no longer held")
	}
	for _, n := range []string{"n1", "n2"} {
		if c.rdb.Exists(ctx, c.OwnerKey(n)).Val() != 0 || c.rdb.HExists(ctx, c.AccountKey("acct"), n).Val() {
			t.Fatalf("%s still claimed after purge", n)
		}
	}
	// The freed places are usable at once.
	for _, n := range []string{"n3", "n4"} {
		if _, err := c.Claim(ctx, "alive", n, "acct", 3); err != nil {
			t.Fatalf("claim %s after purge: %v", n, err)
		}
	}
}

// Redis Cluster runs a script only if all its keys share a hash slot; ours
// share a hash tag.
func TestRedisClaimsKeysShareHashTags(t *testing.T) {
	c := &RedisClaims{cfg: RedisClaimsConfig{Namespace: "sy"}}
	tag := regexp.MustCompile(`\{([^}]+)\}`)
	g, o := tag.FindStringSubmatch(c.GenKey("n1")), tag.FindStringSubmatch(c.OwnerKey("n1"))
	if g == nil || o == nil || g[1] != "n1" || o[1] != "n1" {
		t.Fatalf("gen %q and owner %q do not share the node's hash tag", c.GenKey("n1"), c.OwnerKey("n1"))
	}
	if a := tag.FindStringSubmatch(c.AccountKey("acct")); a == nil || a[1] != "acct" {
		t.Fatalf("account key %q", c.AccountKey("acct"))
	}
}
