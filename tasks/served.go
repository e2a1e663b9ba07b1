package tasks

import (
	"sync"
	"time"
)

// served counts the tasks this instance finished (an outcome from a node:
// completed or failed) per task type over the last minute, in one-second
// buckets, for the demand figures (GET /api/v1/capabilities).
type served struct {
	mu    sync.Mutex
	types map[string]*minuteCount
}

// minuteCount is a ring of 60 one-second buckets.
type minuteCount struct {
	sec [60]int64 // the unix second each bucket counts
	n   [60]int
}

func newServed() *served { return &served{types: map[string]*minuteCount{}} }

func (s *served) add(taskType string, now time.Time) {
	sec := now.Unix()
	i := sec % 60
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.types[taskType]
	if m == nil {
		m = &minuteCount{}
		s.types[taskType] = m
	}
	if m.sec[i] != sec {
		m.sec[i], m.n[i] = sec, 0
	}
	m.n[i]++
}

// lastMinute returns, per task type, the tasks finished in the 60 seconds
// up to now; types with none are dropped.
func (s *served) lastMinute(now time.Time) map[string]int {
	from := now.Unix() - 59
	out := map[string]int{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, m := range s.types {
		total := 0
		for i := range m.sec {
			if m.sec[i] >= from {
				total += m.n[i]
			}
		}
		if total == 0 {
			delete(s.types, t)
			continue
		}
		out[t] = total
	}
	return out
}
