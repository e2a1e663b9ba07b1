package nodes

import (
	"fmt"
	"testing"
)

// BenchmarkSelect is one routing decision among 200 candidates (the load
// profile's node count), a third of them full.
func BenchmarkSelect(b *testing.B) {
	cands := make([]Candidate, 200)
	for i := range cands {
		cands[i] = Candidate{NodeID: fmt.Sprint("node-", i), Owner: "i", FreeSlots: i % 3, CPU: float64(i % 100),
			HasBench: i%2 == 0, BenchMs: float64(i * 10)}
	}
	standing := func(string) Standing { return Standing{Score: 60, AvgMs: 300} }
	pick := Pick{Capability: "echo", Exclude: []string{"node-1", "node-2"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, _ := Select(cands, pick, standing); !ok {
			b.Fatal("no pick")
		}
	}
}
