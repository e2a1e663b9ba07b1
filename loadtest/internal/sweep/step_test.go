package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"

	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/sdk"
)

func TestClassifySweep(t *testing.T) {
	for _, tc := range []struct {
		err              error
		aborted, expired bool
		outcome, key     string
	}{
		{nil, false, false, ledger.OutcomeOK, ""},
		{fmt.Errorf("sdk: %w", &sdk.APIError{Status: 503, Code: "nodes_busy"}), false, false, ledger.OutcomeError, "503 nodes_busy"},
		{&sdk.APIError{Status: 504, Code: "timeout"}, false, true, ledger.OutcomeError, "504 timeout"}, // the server's answer, not ours
		{&answerError{Code: "no_responders"}, false, false, ledger.OutcomeError, "no_responders"},
		{&answerError{Status: 200, Code: "wrong_echo"}, false, false, ledger.OutcomeError, "200 wrong_echo"},
		{context.DeadlineExceeded, false, true, ledger.OutcomeLost, "timeout"},
		{context.Canceled, true, true, ledger.OutcomeAborted, ledger.OutcomeAborted},
		{errors.New("connection reset"), false, false, ledger.OutcomeError, ledger.CodeTransport},
	} {
		outcome, key := classify(tc.err, tc.aborted, tc.expired)
		if outcome != tc.outcome || key != tc.key {
			t.Errorf("classify(%v, %v, %v) = %s %q, want %s %q", tc.err, tc.aborted, tc.expired, outcome, key, tc.outcome, tc.key)
		}
	}
}

// fakeTarget answers after delay: request i (its content "request i")
// with its echo, or as failAt says.
type fakeTarget struct {
	delay  time.Duration
	failAt func(body string) error
}

func (f *fakeTarget) do(ctx context.Context, body string) (string, error) {
	if err := f.failAt(body); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "", err
	}
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(f.delay):
	}
	if body == "request 41" {
		return "something else", nil
	}
	return body, nil
}

// A step sends at its rate without waiting for answers, counts every
// request once, and times each from its due time.
func TestSweepStep(t *testing.T) {
	target := &fakeTarget{delay: 50 * time.Millisecond, failAt: func(body string) error {
		switch body {
		case "request 3", "request 23": // in the warm-up, then counted
			return &sdk.APIError{Status: 503, Code: "nodes_busy"}
		case "request 31":
			return context.DeadlineExceeded // never answered
		}
		return nil
	}}
	// 200/s: 20 in a 100 ms warm-up, then 100 counted; each takes 50 ms,
	// so about ten are in flight at once if nothing waits.
	s := newStep("test", 200, 100*time.Millisecond, 500*time.Millisecond, 200*time.Millisecond, target)
	s.run(context.Background())
	r := s.row()
	if r.Expected != 100 || r.Sent != 100 || r.OK+r.Errors+r.Timeouts != r.Sent || r.NoOutcome != 0 || r.Doubles != 0 {
		t.Fatalf("accounting: %+v", r)
	}
	if r.Errors != 2 || r.NonOK["503 nodes_busy"] != 1 || r.NonOK["200 wrong_echo"] != 0 || r.NonOK["wrong_echo"] != 1 ||
		r.Timeouts != 1 || r.NonOK["timeout"] != 1 || r.WarmupNotOK != 1 {
		t.Errorf("outcomes: %+v", r)
	}
	if ex := r.Examples["wrong_echo"]; !strings.Contains(ex, `sent "request 41", got "something else"`) {
		t.Errorf("the wrong echo's example: %q", ex)
	}
	if r.MaxInFlight < 5 {
		t.Errorf("at most %d requests in flight: the generator waited for answers", r.MaxInFlight)
	}
	if r.Latency.N != r.OK || r.Latency.Min < 50 {
		t.Errorf("latency %+v: the answers took 50 ms", r.Latency)
	}

	// A step that starts a second behind schedule sends everything at
	// once: every request is late, and its latency counts the wait.
	target.failAt = func(string) error { return nil }
	s = newStep("test", 200, 100*time.Millisecond, 500*time.Millisecond, 5*time.Second, target)
	s.start = s.start.Add(-time.Second)
	s.run(context.Background())
	r = s.row()
	if r.Sent != 100 || r.Late != 100 || r.MaxLagMs < 850 || r.Lag.N != 100 || r.Lag.Min < 400 {
		t.Errorf("a generator a second behind: %d sent, %d late, worst lag %.0f ms", r.Sent, r.Late, r.MaxLagMs)
	}
	if r.Latency.Min < 400+50 {
		t.Errorf("latency from the due time: min %.0f ms, want over 450 (400 ms late at least, then 50 ms)", r.Latency.Min)
	}

	// Interrupted: what was not sent is not counted, what was sent has
	// its outcome.
	ctx, cancel := context.WithCancel(context.Background())
	s = newStep("test", 200, 100*time.Millisecond, 500*time.Millisecond, 5*time.Second, target)
	time.AfterFunc(300*time.Millisecond, cancel)
	s.run(ctx)
	r = s.row()
	if r.Sent == 0 || r.Sent >= r.Expected || r.OK+r.Errors+r.Timeouts != r.Sent || r.NoOutcome != 0 {
		t.Errorf("interrupted: %+v", r)
	}
}

// spinTarget echoes after spinning for a while on this process's CPU.
type spinTarget struct{ sink atomic.Uint64 }

func (f *spinTarget) do(_ context.Context, body string) (string, error) {
	var x uint64
	for i := range 2_000_000 {
		x += uint64(i) * uint64(i)
	}
	f.sink.Add(x)
	return body, nil
}

// A step with a probe reads its processes' CPU over the counted window and
// divides it by the ok requests.
func TestSweepStepMeasuresCPU(t *testing.T) {
	cfg := config.Config{Duration: 300 * time.Millisecond, TaskTimeout: time.Second}
	probe := &cluster.Probe{Procs: []cluster.ProbeProc{
		{Role: cluster.RoleLoadTest, Name: "load test", PID: os.Getpid()},
		{Role: cluster.RoleInstance, Name: "gone", PID: -1},
	}}
	r := runStep(context.Background(), cfg, "test", 100, &spinTarget{}, io.Discard, meters{probe: probe})
	if r.OK != 30 || r.CPU == nil {
		t.Fatalf("ok %d, cpu %+v", r.OK, r.CPU)
	}
	if len(r.CPU.Procs) != 1 || r.CPU.Procs[0].Role != cluster.RoleLoadTest || r.CPU.InstanceUs != 0 {
		t.Fatalf("procs %+v: the one that cannot be read is left out", r.CPU.Procs)
	}
	p := r.CPU.Procs[0]
	if p.CPUMs <= 0 || math.Abs(p.UsPerRequest-1000*p.CPUMs/30) > 0.01 {
		t.Errorf("load test: %.3f ms, %.3f µs/request over 30 requests", p.CPUMs, p.UsPerRequest)
	}
	// The last counted request is due 0.29 s after the first.
	if r.CPU.WindowS < 0.25 {
		t.Errorf("window %.3f s, shorter than the counted requests' due times span", r.CPU.WindowS)
	}
	// Without a probe, nothing is measured.
	if r := runStep(context.Background(), cfg, "test", 100, &spinTarget{}, io.Discard, meters{}); r.CPU != nil || r.Redis != nil || r.InstanceAllocs != 0 {
		t.Errorf("no meters, yet cpu %+v, redis %+v, allocs %v", r.CPU, r.Redis, r.InstanceAllocs)
	}
}

// A step with readers of Redis's command counts and of the instances'
// allocations reads them when its counted window opens and when it ends,
// and divides by the ok requests; a failed read leaves them out.
func TestSweepStepCountsRedisCommandsAndAllocations(t *testing.T) {
	cfg := config.Config{Duration: 300 * time.Millisecond, TaskTimeout: time.Second}
	var reads atomic.Int64
	// Each read sees 60 more publishes and 15 more HSETs than the one
	// before, and one more INFO (the reads themselves).
	calls := func(context.Context) (map[string]int64, error) {
		n := reads.Add(1)
		return map[string]int64{"publish": 60 * n, "hset": 15 * n, "info": n}, nil
	}
	var mreads atomic.Int64
	mallocs := func(context.Context) (float64, error) { return float64(1000 + 900*mreads.Add(1)), nil }
	r := runStep(context.Background(), cfg, "test", 100, &spinTarget{}, io.Discard, meters{redis: calls, mallocs: mallocs})
	if r.OK != 30 || r.Redis == nil || reads.Load() != 2 {
		t.Fatalf("ok %d, redis %+v after %d reads", r.OK, r.Redis, reads.Load())
	}
	if r.InstanceAllocs != 30 {
		t.Errorf("%v allocations per request, want 900/30", r.InstanceAllocs)
	}
	if r.Redis.Publishes != 2 || r.Redis.Commands != 2.5 || r.Redis.ByCommand["hset"] != 0.5 || len(r.Redis.ByCommand) != 2 {
		t.Errorf("redis %+v; want 2 publishes and 2.5 commands a request, INFO left out", r.Redis)
	}
	failing := func(context.Context) (map[string]int64, error) { return nil, errors.New("no redis") }
	failingM := func(context.Context) (float64, error) { return 0, errors.New("no metrics") }
	if r := runStep(context.Background(), cfg, "test", 100, &spinTarget{}, io.Discard, meters{redis: failing, mallocs: failingM}); r.Redis != nil || r.InstanceAllocs != 0 {
		t.Errorf("the reads failed, yet redis %+v, allocs %v", r.Redis, r.InstanceAllocs)
	}
}
