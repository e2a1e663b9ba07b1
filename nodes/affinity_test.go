package nodes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// runAffinity is the suite both Affinity implementations pass.
func runAffinity(t *testing.T, a Affinity) {
	ctx := context.Background()
	last := func(session, want string) {
		t.Helper()
		if got, err := a.Last(ctx, session); err != nil || got != want {
			t.Fatalf("Last(%s) = %q, %v; want %q", session, got, err, want)
		}
	}
	last("s1", "")
	if err := a.Remember(ctx, "s1", "node-a"); err != nil {
		t.Fatal(err)
	}
	last("s1", "node-a")
	last("s2", "")
	if err := a.Remember(ctx, "s1", "node-b"); err != nil {
		t.Fatal(err)
	}
	last("s1", "node-b")
}

func TestMemoryAffinity(t *testing.T) {
	runAffinity(t, NewMemoryAffinity(0))

	// The TTL runs from the last use; expired entries are swept as the map grows.
	a := NewMemoryAffinity(time.Minute)
	now := time.Unix(1_000_000, 0)
	a.now = func() time.Time { return now }
	ctx := context.Background()
	_ = a.Remember(ctx, "s", "n")
	now = now.Add(50 * time.Second)
	if got, _ := a.Last(ctx, "s"); got != "n" {
		t.Fatalf("after 50 s: %q, want n", got)
	}
	now = now.Add(50 * time.Second) // 100 s after Remember, 50 s after Last
	if got, _ := a.Last(ctx, "s"); got != "n" {
		t.Fatalf("50 s after its last use: %q, want n (the TTL runs from the last use)", got)
	}
	now = now.Add(61 * time.Second)
	if got, _ := a.Last(ctx, "s"); got != "" {
		t.Fatalf("past its TTL: %q, want none", got)
	}
	for i := range 3000 {
		_ = a.Remember(ctx, fmt.Sprint("old-", i), "n")
	}
	now = now.Add(2 * time.Minute)
	for i := range 3000 {
		_ = a.Remember(ctx, fmt.Sprint("new-", i), "n")
	}
	if n := len(a.m); n > 3000+1024 {
		t.Errorf("%d entries kept, want the expired ones swept", n)
	}
}

func TestRedisAffinity(t *testing.T) {
	rdb := redistest.Client(t)
	runAffinity(t, NewRedisAffinity(rdb, AffinityPrefix(redistest.Namespace(t)), 0))
	// The TTL is set, and renewed by Last.
	ns := redistest.Namespace(t)
	a := NewRedisAffinity(rdb, AffinityPrefix(ns), time.Hour)
	ctx := context.Background()
	_ = a.Remember(ctx, "s", "n")
	rdb.Expire(ctx, AffinityPrefix(ns)+"s", time.Minute)
	if _, err := a.Last(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.TTL(ctx, AffinityPrefix(ns)+"s").Val(); ttl < 59*time.Minute {
		t.Errorf("TTL %s after Last, want it renewed to an hour", ttl)
	}
}

func TestSelectPrefers(t *testing.T) {
	cands := []Candidate{
		{NodeID: "good", FreeSlots: 4},
		{NodeID: "sticky", FreeSlots: 1, CPU: 100},
		{NodeID: "full", FreeSlots: 0, Owner: "here"},
		{NodeID: "far", FreeSlots: 0, Owner: "there"},
		{NodeID: "bad", FreeSlots: 1},
	}
	standing := func(id string) Standing {
		switch id {
		case "good":
			return Standing{Score: 100}
		case "bad":
			return Standing{Score: 0, Suspended: true}
		}
		return Standing{Score: 10}
	}
	for range 50 {
		if c, ok, _ := Select(cands, Pick{Prefer: "sticky"}, standing); !ok || c.NodeID != "sticky" {
			t.Fatalf("preferring sticky: %s, %v", c.NodeID, ok)
		}
	}
	// A preferred node that is full here (this instance holds it),
	// suspended, excluded or gone: the best other.
	for _, p := range []Pick{{Prefer: "full", Local: "here"}, {Prefer: "bad"}, {Prefer: "sticky", Exclude: []string{"sticky"}}, {Prefer: "gone"}} {
		if c, ok, _ := Select(cands, p, standing); !ok || c.NodeID != "good" {
			t.Errorf("%+v: %s, %v; want good", p, c.NodeID, ok)
		}
	}
	// Full in this instance's view of another's node: its owner decides.
	if c, ok, _ := Select(cands, Pick{Prefer: "far", Local: "here"}, standing); !ok || c.NodeID != "far" {
		t.Errorf("preferring another instance's node seen full: %s, %v; want far (its owner refuses if it is)", c.NodeID, ok)
	}
}
