package nodes

import (
	"math"
	"testing"
)

func TestScore(t *testing.T) {
	cases := []struct {
		st     Standing
		cpu    float64
		jitter float64
		want   float64
	}{
		// A new node: 0.25 + 0.25·0.5 + 0.15 + 0.10 + 0 + 0 = 0.625.
		{Standing{Score: 50}, 0, 0, 0.625},
		{Standing{Score: 100, AvgMs: 5000}, 50, 1, 0.25 + 0.25 + 0.075 + 0.05 + 0.10},
		{Standing{Score: 50, HasBench: true, BenchMs: 2000}, 0, 0, 0.625 + 0.15*0.8},
		{Standing{Score: 50, HasBench: true, BenchMs: 20000, BenchFailed: true}, 100, 0, 0.25 + 0.125 + 0 + 0.10 + 0 - 0.2},
	}
	for _, c := range cases {
		if got := Score(c.st, c.cpu, c.jitter); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Score(%+v, cpu %v, jitter %v) = %v; want %v", c.st, c.cpu, c.jitter, got, c.want)
		}
	}
}

func TestSelectFilters(t *testing.T) {
	cands := []Candidate{
		{NodeID: "full", FreeSlots: 0, Trust: "official"},
		{NodeID: "suspended", FreeSlots: 1, Trust: "official"},
		{NodeID: "tried", FreeSlots: 1, Trust: "official"},
		{NodeID: "community", FreeSlots: 1, Trust: "community"},
		{NodeID: "official", FreeSlots: 1, Trust: "official"},
	}
	standing := func(id string) Standing { return Standing{Score: 50, Suspended: id == "suspended"} }
	for i := 0; i < 50; i++ {
		c, ok, _ := Select(cands, Pick{Trust: TrustOfficial, Exclude: []string{"tried"}}, standing)
		if !ok || c.NodeID != "official" {
			t.Fatalf("official pick = %v, %v", c.NodeID, ok)
		}
	}
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		c, ok, _ := Select(cands, Pick{Exclude: []string{"tried"}}, standing)
		if !ok {
			t.Fatal("no pick")
		}
		seen[c.NodeID] = true
	}
	if len(seen) != 2 || !seen["community"] || !seen["official"] {
		t.Fatalf("picks over 200 draws: %v; want only community and official", seen)
	}
	_, ok, busy := Select(cands, Pick{Exclude: []string{"tried", "community", "official"}}, standing)
	if ok || !busy {
		t.Fatalf("Select = found %v, busy %v; want not found and busy (the full node)", ok, busy)
	}
	_, ok, busy = Select(cands[1:], Pick{Exclude: []string{"tried", "community", "official"}}, standing)
	if ok || busy {
		t.Fatalf("Select with only suspended and excluded nodes = found %v, busy %v; want neither", ok, busy)
	}
}

func TestSelectPrefersReputation(t *testing.T) {
	cands := []Candidate{{NodeID: "good", FreeSlots: 1}, {NodeID: "bad", FreeSlots: 1}}
	standing := func(id string) Standing {
		if id == "good" {
			return Standing{Score: 95}
		}
		return Standing{Score: 10}
	}
	// 0.25·0.85 = 0.21 between them outweighs the 0.10 random term: always good.
	for i := 0; i < 100; i++ {
		if c, _, _ := Select(cands, Pick{}, standing); c.NodeID != "good" {
			t.Fatalf("picked %s over a node with far better reputation", c.NodeID)
		}
	}
}

// A pick that demands labels admits only nodes that declared all of them
// with the same values; busy then speaks of those nodes alone.
func TestSelectLabels(t *testing.T) {
	eu := map[string]string{"region": "eu-west", "gpu": "l4"}
	cands := []Candidate{
		{NodeID: "plain", FreeSlots: 1},
		{NodeID: "us", FreeSlots: 1, Labels: map[string]string{"region": "us-east", "gpu": "l4"}},
		{NodeID: "eu", FreeSlots: 1, Labels: eu},
		{NodeID: "eu-full", FreeSlots: 0, Labels: eu},
	}
	standing := func(string) Standing { return Standing{Score: 50} }
	for range 50 {
		if c, ok, _ := Select(cands, Pick{Labels: map[string]string{"region": "eu-west"}}, standing); !ok || c.NodeID != "eu" {
			t.Fatalf("region=eu-west picked %q, %v; want eu", c.NodeID, ok)
		}
		if c, ok, _ := Select(cands, Pick{Labels: map[string]string{"gpu": "l4", "region": "us-east"}}, standing); !ok || c.NodeID != "us" {
			t.Fatalf("gpu=l4,region=us-east picked %q, %v; want us", c.NodeID, ok)
		}
	}
	if _, ok, busy := Select(cands, Pick{Labels: eu, Exclude: []string{"eu"}}, standing); ok || !busy {
		t.Fatalf("only a full node has the labels: found %v, busy %v; want busy", ok, busy)
	}
	if _, ok, busy := Select(cands, Pick{Labels: map[string]string{"region": "ap-south"}}, standing); ok || busy {
		t.Fatalf("no node has the label: found %v, busy %v; want neither", ok, busy)
	}
	seen := map[string]bool{}
	for range 200 {
		c, _, _ := Select(cands, Pick{}, standing)
		seen[c.NodeID] = true
	}
	if len(seen) != 3 {
		t.Fatalf("a pick with no labels took %v over 200 draws; want plain, us and eu", seen)
	}
}
