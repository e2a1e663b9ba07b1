package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// BenchmarkPrompts are the short probes a node answers after it registers
// (GemmaNet's).
var BenchmarkPrompts = []string{
	"Reply with exactly: Hello GemmaNet",
	"Write a 50-word paragraph about AI.",
	"BENCHMARK_ECHO_TEST",
}

// ErrNoBenchmark is what a Benchmarks store returns for a node without one.
var ErrNoBenchmark = errors.New("no benchmark")

// Benchmarks keeps each node's latest benchmark profile (the server backs
// it with the store, so every instance sees it).
type Benchmarks interface {
	// Last returns the node's stored profile, or ErrNoBenchmark.
	Last(ctx context.Context, nodeID string) (BenchmarkProfile, error)
	Save(ctx context.Context, p BenchmarkProfile) error
}

// BenchmarkProfile is a node's benchmark as GET /api/v1/benchmark shows it.
// The timing is the coordinator's own round-trip measurement, not what the
// node reports, so a node cannot fake a fast profile.
type BenchmarkProfile struct {
	NodeID                string               `json:"node_id"`
	AvgResponseMs         float64              `json:"avg_response_ms"`
	EstimatedTokensPerSec float64              `json:"estimated_tokens_per_sec"`
	BenchmarkPassed       bool                 `json:"benchmark_passed"`
	Results               []wire.BenchmarkItem `json:"results"`   // as the node reported them, trimmed
	Timestamp             int64                `json:"timestamp"` // unix seconds
}

// benchSummary is what routing needs of a profile.
type benchSummary struct {
	avgMs  float64
	passed bool
	at     time.Time
}

// NewBenchmarkProfile builds a profile from a node's benchmark_result
// payload and the round trip the coordinator measured. The payload is read
// leniently (wire.DecodeBenchmarkResult: what cannot be read counts as a
// failed answer) and trimmed: one item per prompt at most, text clipped.
func NewBenchmarkProfile(nodeID string, payload json.RawMessage, measured time.Duration, now time.Time) BenchmarkProfile {
	items := wire.DecodeBenchmarkResult(payload).Results
	if len(items) > len(BenchmarkPrompts) {
		items = items[:len(BenchmarkPrompts)]
	}
	for i, it := range items {
		it.Prompt, it.Response = clipRunes(it.Prompt, 200), clipRunes(it.Response, 500)
		it.TimeMs = min(it.TimeMs, 1e9)
		items[i] = it
	}
	n := max(len(items), 1)
	passed := len(items) > 0
	out := 0
	for _, it := range items {
		passed = passed && it.Success
		out += utf8.RuneCountInString(it.Response)
	}
	if items == nil {
		items = []wire.BenchmarkItem{}
	}
	ms := float64(measured.Microseconds()) / 1000
	return BenchmarkProfile{
		NodeID:                nodeID,
		AvgResponseMs:         round1(ms / float64(n)),
		EstimatedTokensPerSec: round2(float64(out) / max(measured.Seconds(), 0.001)),
		BenchmarkPassed:       passed,
		Results:               items,
		Timestamp:             now.Unix(),
	}
}

func (p BenchmarkProfile) summary() *benchSummary {
	return &benchSummary{avgMs: p.AvgResponseMs, passed: p.BenchmarkPassed, at: time.Unix(p.Timestamp, 0)}
}

// clipRunes is s's first n characters, without NUL: the profile is kept
// in a PostgreSQL jsonb column, which refuses a NUL in a string, so one
// answer with a NUL would leave the node without a stored benchmark and
// log a warning at every registration.
func clipRunes(s string, n int) string {
	s = strings.ReplaceAll(s, "\x00", "")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// startBenchmark runs when a node has registered: its stored profile, if
// recent, feeds routing; otherwise the node is asked for a new one.
func (h *Hub) startBenchmark(ctx context.Context, s *Session) {
	if h.cfg.Benchmarks == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	p, err := h.cfg.Benchmarks.Last(lctx, s.NodeID)
	cancel()
	if err == nil {
		s.bench.Store(p.summary())
		s.hub.cfg.Changes.Mark(s.NodeID)
	}
	h.maybeBenchmark(s, time.Now())
}

// maybeBenchmark asks the node for a benchmark when it has none, or one
// older than BenchmarkMaxAge, and no request is outstanding (one that went
// unanswered for BenchmarkReplyTimeout is given up). It runs on
// registration and on each heartbeat.
func (h *Hub) maybeBenchmark(s *Session, now time.Time) {
	if h.cfg.Benchmarks == nil {
		return
	}
	if sent := s.benchSentAt.Load(); sent != 0 {
		if now.Sub(time.Unix(0, sent)) < h.cfg.BenchmarkReplyTimeout {
			return
		}
		s.benchSentAt.CompareAndSwap(sent, 0)
	}
	if b := s.bench.Load(); b != nil && now.Sub(b.at) < h.cfg.BenchmarkMaxAge {
		return
	}
	if s.benchSentAt.CompareAndSwap(0, now.UnixNano()) {
		s.Send(wire.MustEncode(wire.MsgBenchmark, wire.BenchmarkPayload{Prompts: BenchmarkPrompts}))
	}
}

// benchmarkResult takes a node's answer to a benchmark it was asked for; an
// unsolicited one is ignored (and counted).
func (h *Hub) benchmarkResult(s *Session, payload json.RawMessage) {
	sent := s.benchSentAt.Load()
	if h.cfg.Benchmarks == nil || sent == 0 || !s.benchSentAt.CompareAndSwap(sent, 0) {
		h.metrics.invalid.WithLabelValues("unsolicited_benchmark").Inc()
		return
	}
	now := time.Now()
	p := NewBenchmarkProfile(s.NodeID, payload, now.Sub(time.Unix(0, sent)), now)
	s.bench.Store(p.summary())
	s.hub.cfg.Changes.Mark(s.NodeID)
	s.log.Info("benchmark measured", "avg_ms", p.AvgResponseMs, "passed", p.BenchmarkPassed)
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.cfg.Benchmarks.Save(ctx, p); err != nil {
			s.log.Warn("cannot store the benchmark", "err", err)
		}
	}()
}

// benchFields are the benchmark inputs of routing for a session.
func (s *Session) benchFields() (has bool, ms float64, failed bool) {
	b := s.bench.Load()
	if b == nil {
		return false, 0, false
	}
	return true, b.avgMs, !b.passed
}
