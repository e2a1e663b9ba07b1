package nodes

import (
	"math/rand/v2"
	"slices"
)

// TrustOfficial is the tier a request may demand; nodes of other tiers are
// then never picked.
const TrustOfficial = "official"

// Standing is what reputation and benchmarks say of a node. Select fills
// the benchmark fields from the candidate (the owner knows them); the rest
// comes from the reputation cache.
type Standing struct {
	Score       float64 // reputation, 0-100 (50 for a new node)
	AvgMs       float64 // average response time; 0 when unknown
	Suspended   bool
	HasBench    bool
	BenchMs     float64 // average benchmark response time
	BenchFailed bool
}

// Pick says what a request needs of a node.
type Pick struct {
	Capability string
	Trust      string // "official" admits only official nodes; anything else admits all
	// Labels admits only nodes that declared every one of them, with the
	// same value; nil admits all.
	Labels  map[string]string
	Exclude []string // nodes already tried for this request
	// Prefer is a node to take whenever it qualifies and has a free slot,
	// whatever the others' scores (session affinity); "" for none. A
	// preferred node held by another instance than Local is taken even
	// when this instance's view of its slots says full: that view lags its
	// owner's by up to the directory's write interval, and the owner, which
	// knows, refuses an assign over its slots (the requester then picks
	// again, without it).
	Prefer string
	Local  string
}

// Select picks the best candidate by GemmaNet's score (docs/PROTOCOL.md),
// among nodes that are not suspended, not excluded, of the demanded trust,
// and with a free slot. When none qualifies, found is false and busy says
// whether some node would have, but for its slots being full.
func Select(cands []Candidate, p Pick, standing func(nodeID string) Standing) (best Candidate, found, busy bool) {
	bestScore := 0.0
	full := false // a full node passed the cheap checks: maybe busy
	for _, c := range cands {
		if !p.admits(c) {
			continue
		}
		if p.Prefer != "" && c.NodeID == p.Prefer && c.FreeSlots <= 0 && c.Owner != p.Local && !standing(c.NodeID).Suspended {
			return c, true, false
		}
		if c.FreeSlots <= 0 {
			full = true // its standing is asked only if no node is free (below)
			continue
		}
		st := standing(c.NodeID)
		if st.Suspended {
			continue
		}
		if p.Prefer != "" && c.NodeID == p.Prefer {
			return c, true, false
		}
		st.HasBench, st.BenchMs, st.BenchFailed = c.HasBench, c.BenchMs, c.BenchFailed
		score := Score(st, c.CPU, rand.Float64())
		if !found || score > bestScore {
			best, bestScore, found = c, score, true
		}
	}
	if found || !full {
		return best, found, false
	}
	// Busy means a node would qualify but for its slots: a suspended one
	// would not.
	for _, c := range cands {
		if c.FreeSlots <= 0 && p.admits(c) && !standing(c.NodeID).Suspended {
			return best, false, true
		}
	}
	return best, false, false
}

// admits is what p asks of a node before its standing: not tried yet, of
// the demanded trust, and with the demanded labels.
func (p Pick) admits(c Candidate) bool {
	return !slices.Contains(p.Exclude, c.NodeID) && (p.Trust != TrustOfficial || c.Trust == TrustOfficial) &&
		HasLabels(c.Labels, p.Labels)
}

// HasLabels reports whether have holds every label of want, with its value.
func HasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Score is GemmaNet's routing score for a node that has the capability:
// 0.25 for the match, 0.25·reputation/100, 0.15·(1 − cpu/100),
// 0.10·speed, 0.15·benchmark speed, 0.10·random, and −0.2 for a failed
// benchmark. jitter is the random draw in [0, 1).
func Score(st Standing, cpu, jitter float64) float64 {
	speed := 1 - min(st.AvgMs/10000, 1)
	bench, penalty := 0.0, 0.0
	if st.HasBench {
		bench = 1 - min(st.BenchMs/10000, 1)
		if st.BenchFailed {
			penalty = 0.2
		}
	}
	return 0.25 + 0.25*st.Score/100 + 0.15*(1-cpu/100) + 0.10*speed + 0.15*bench + 0.10*jitter - penalty
}
