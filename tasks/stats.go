package tasks

import (
	"math"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// The operator's figures (the dashboard): per task type, the
// requests this instance finished over the last five minutes, how many of
// them failed and how long they took, in ten-second slots; and its last
// failures. Each instance keeps its own; the server publishes them and
// merges every instance's on read. Latency is kept as histogram buckets so
// that the percentiles of several instances come from their summed
// buckets, not from an average of their percentiles.

const (
	// StatsSlot is the width of one slot of the series.
	StatsSlot = 10 * time.Second
	// StatsSlots is how many slots the window holds (five minutes); the
	// last is the slot now running.
	StatsSlots = 30
	// LatencyBuckets is the number of histogram buckets: bucket i holds
	// latencies up to 2^(i/4) ms (each about 19 % wider than the one
	// before), the last everything from about 9 minutes on.
	LatencyBuckets = 80

	// maxStatsTypes bounds the task types kept: a client may name any
	// type, and a request for one no node serves still fails here.
	maxStatsTypes = 256
	// MaxFailures is how many failures an instance keeps, and a merge.
	MaxFailures = 20
	// failureMaxAge: older failures are dropped, so an instance that had
	// one and then went idle stops publishing after a while.
	failureMaxAge = time.Hour
	// maxFailureMessage bounds a failure's message, in runes.
	maxFailureMessage = 160
)

// Histogram is request latency counts by bucket (see LatencyBuckets),
// trailing empty buckets left out.
type Histogram []uint64

// latencyBucket is the bucket of a latency.
func latencyBucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 0
	}
	return min(int(math.Ceil(4*math.Log2(ms))), LatencyBuckets-1)
}

// bucketBound is the upper bound of bucket i, in ms.
func bucketBound(i int) float64 { return math.Exp2(float64(i) / 4) }

// Count is the number of latencies in h.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Merge returns the sum of h and o (neither is changed).
func (h Histogram) Merge(o Histogram) Histogram {
	out := make(Histogram, max(len(h), len(o)))
	copy(out, h)
	for i, c := range o {
		out[i] += c
	}
	return out
}

// Quantile estimates the q-quantile (0 < q ≤ 1) in ms, interpolating
// within the bucket it falls in; 0 when h is empty.
func (h Histogram) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen float64
	for i, c := range h {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo := 0.0
			if i > 0 {
				lo = bucketBound(i - 1)
			}
			return lo + (bucketBound(i)-lo)*(rank-seen)/float64(c)
		}
		seen += float64(c)
	}
	return bucketBound(len(h) - 1)
}

// TypeStats is one task type's figures over the window.
type TypeStats struct {
	// Finished and Failed are per slot, oldest first, StatsSlots long; the
	// last is the slot now running. Failed counts are within Finished.
	Finished []int     `json:"finished"`
	Failed   []int     `json:"failed"`
	Latency  Histogram `json:"latency"` // of every finished request in the window
}

// Failure is one request that did not end with a completed result.
type Failure struct {
	At       time.Time `json:"at"`
	TaskType string    `json:"task_type"`
	Code     string    `json:"code"`
	Message  string    `json:"message,omitempty"`
	NodeID   string    `json:"node_id,omitempty"`
	Instance string    `json:"instance"` // the requesting instance's id
}

// StatsSnapshot is an instance's figures (or several instances' merged).
type StatsSnapshot struct {
	// Slot numbers the window's last slot: unix seconds / 10.
	Slot     int64                `json:"slot"`
	Types    map[string]TypeStats `json:"types"`
	Failures []Failure            `json:"failures"` // newest first, at most MaxFailures
}

// Empty reports whether there is nothing in the snapshot.
func (s StatsSnapshot) Empty() bool { return len(s.Types) == 0 && len(s.Failures) == 0 }

// slotOf numbers the slot a time falls in.
func slotOf(t time.Time) int64 { return t.Unix() / int64(StatsSlot/time.Second) }

// stats is one instance's figures, in rings of StatsSlots slots.
type stats struct {
	instance string

	mu       sync.Mutex
	types    map[string]*typeRing
	failures []Failure // newest last, at most MaxFailures
}

// typeRing is one task type's slots; slot[i] says which slot index i holds.
type typeRing struct {
	slot     [StatsSlots]int64
	finished [StatsSlots]int
	failed   [StatsSlots]int
	hist     [StatsSlots][LatencyBuckets]uint32
}

func newStats(instance string) *stats {
	return &stats{instance: instance, types: map[string]*typeRing{}}
}

// add counts a finished request: code "" is a success; nodeID and message
// may be empty.
func (s *stats) add(taskType string, now time.Time, took time.Duration, code, nodeID, message string) {
	sl := slotOf(now)
	i := int(sl % StatsSlots)
	b := latencyBucket(took)
	s.mu.Lock()
	defer s.mu.Unlock()
	if code != "" {
		s.failures = append(s.failures, Failure{At: now.UTC(), TaskType: taskType, Code: code,
			Message: truncate(message, maxFailureMessage), NodeID: nodeID, Instance: s.instance})
		if len(s.failures) > MaxFailures {
			s.failures = slices.Delete(s.failures, 0, len(s.failures)-MaxFailures)
		}
	}
	r := s.types[taskType]
	if r == nil {
		if len(s.types) >= maxStatsTypes {
			return // the failure is kept; the figures of one type too many are not
		}
		r = &typeRing{}
		s.types[taskType] = r
	}
	if r.slot[i] != sl {
		r.slot[i], r.finished[i], r.failed[i], r.hist[i] = sl, 0, 0, [LatencyBuckets]uint32{}
	}
	r.finished[i]++
	if code != "" {
		r.failed[i]++
	}
	r.hist[i][b]++
}

// snapshot is the figures of the window that ends now. Types with nothing
// in it, and failures older than failureMaxAge, are dropped.
func (s *stats) snapshot(now time.Time) StatsSnapshot {
	cur := slotOf(now)
	out := StatsSnapshot{Slot: cur, Types: map[string]TypeStats{}, Failures: []Failure{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, r := range s.types {
		ts := TypeStats{Finished: make([]int, StatsSlots), Failed: make([]int, StatsSlots)}
		var hist [LatencyBuckets]uint64
		total := 0
		for k := range StatsSlots {
			sl := cur - StatsSlots + 1 + int64(k)
			i := int(sl % StatsSlots)
			if r.slot[i] != sl {
				continue
			}
			ts.Finished[k], ts.Failed[k] = r.finished[i], r.failed[i]
			total += r.finished[i]
			for b, c := range r.hist[i] {
				hist[b] += uint64(c)
			}
		}
		if total == 0 {
			delete(s.types, t)
			continue
		}
		ts.Latency = trim(hist[:])
		out.Types[t] = ts
	}
	cut := 0
	for cut < len(s.failures) && now.Sub(s.failures[cut].At) > failureMaxAge {
		cut++
	}
	s.failures = slices.Delete(s.failures, 0, cut)
	for i := len(s.failures) - 1; i >= 0; i-- {
		out.Failures = append(out.Failures, s.failures[i])
	}
	return out
}

// MergeStats adds up several instances' snapshots, each aligned on the
// newest one's slot (an instance's figures may be a second older than
// another's); slots that fall out of the window are dropped. Failures
// come newest first, at most MaxFailures.
func MergeStats(snaps ...StatsSnapshot) StatsSnapshot {
	var cur int64
	for _, s := range snaps {
		cur = max(cur, s.Slot)
	}
	out := StatsSnapshot{Slot: cur, Types: map[string]TypeStats{}, Failures: []Failure{}}
	for _, s := range snaps {
		shift := int(cur - s.Slot) // how many slots s is behind
		for t, ts := range s.Types {
			m, ok := out.Types[t]
			if !ok {
				m = TypeStats{Finished: make([]int, StatsSlots), Failed: make([]int, StatsSlots)}
			}
			for k := range StatsSlots {
				j := k - shift
				if j < 0 || k >= len(ts.Finished) || k >= len(ts.Failed) {
					continue
				}
				m.Finished[j] += ts.Finished[k]
				m.Failed[j] += ts.Failed[k]
			}
			// The histogram is of s's whole window; a slot or two behind,
			// it is still the best estimate of the one that ends now.
			m.Latency = m.Latency.Merge(ts.Latency)
			out.Types[t] = m
		}
		out.Failures = append(out.Failures, s.Failures...)
	}
	slices.SortStableFunc(out.Failures, func(a, b Failure) int { return b.At.Compare(a.At) })
	if len(out.Failures) > MaxFailures {
		out.Failures = out.Failures[:MaxFailures]
	}
	return out
}

// trim drops trailing empty buckets.
func trim(h []uint64) Histogram {
	n := len(h)
	for n > 0 && h[n-1] == 0 {
		n--
	}
	return slices.Clone(Histogram(h[:n]))
}

// truncate shortens s to at most n runes.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
