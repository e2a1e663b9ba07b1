package sweep

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/live"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// slot is one request of a step. Only the request's own goroutine
// writes it; the step reads it once it has waited for them all.
type slot struct {
	sent     bool
	lag      time.Duration // from its due time until it went out
	latency  time.Duration // from its due time until its outcome
	outcome  string
	key      string // a non-ok outcome's, see classify
	msg      string // a non-ok outcome's error, shortened
	outcomes int    // outcomes written: exactly one once the step has ended
}

// step is one rate of one mode: an open-loop generator, where
// request i is due at start + i/rate whatever happened to the others.
type step struct {
	mode   string
	rate   float64
	warmup int           // the first warmup requests are not counted
	total  int           // requests due, the warm-up's included
	limit  time.Duration // each request's deadline from when it goes out
	target target
	start  time.Time
	slots  []slot

	wg                    sync.WaitGroup
	inFlight, maxInFlight atomic.Int64
	sentN, okN, notOKN    atomic.Int64 // for the progress line
	lateN                 atomic.Int64
}

// newStep prepares a step that starts now: warmup at rate, not
// counted, then counted at rate.
func newStep(mode string, rate float64, warmup, counted, limit time.Duration, target target) *step {
	warm := int(math.Round(rate * warmup.Seconds()))
	total := warm + int(math.Round(rate*counted.Seconds()))
	return &step{mode: mode, rate: rate, warmup: warm, total: total, limit: limit, target: target,
		start: time.Now(), slots: make([]slot, total)}
}

// due is when request i is to go out.
func (s *step) due(i int) time.Time {
	return s.start.Add(time.Duration(float64(i) * float64(time.Second) / s.rate))
}

// run sends every request at its due time and returns once each has its
// outcome (or ctx has ended and the rest were never sent). The
// scheduler wakes for the next due time and launches every request due
// by then, each in its own goroutine: after a late wake-up the overdue
// ones go out at once, and no request ever waits for another's answer.
// Their latencies count from the due time, so a generator that fell
// behind shows as latency and as late sends, never as a lighter load.
func (s *step) run(ctx context.Context) {
	for i := 0; i < s.total; {
		if !live.SleepUntil(ctx, s.due(i)) {
			break
		}
		now := time.Now()
		for ; i < s.total && !s.due(i).After(now); i++ {
			j := i // i moves on before the goroutine runs
			s.wg.Go(func() { s.send(ctx, j) })
		}
	}
	s.wg.Wait()
}

// send runs request i to its outcome.
func (s *step) send(ctx context.Context, i int) {
	sl := &s.slots[i]
	due := s.due(i)
	rctx, cancel := context.WithTimeout(ctx, s.limit)
	defer cancel()
	body := ledger.Content(int64(i))
	storeMax(&s.maxInFlight, s.inFlight.Add(1))
	sent := time.Now()
	sl.sent, sl.lag = true, sent.Sub(due)
	s.sentN.Add(1)
	if sl.lag > config.SweepLate {
		s.lateN.Add(1)
	}
	echo, err := s.target.do(rctx, body)
	done := time.Now()
	s.inFlight.Add(-1)
	if err == nil && echo != body {
		err = &answerError{Code: "wrong_echo", Message: fmt.Sprintf("sent %q, got %.40q", body, echo)}
	}
	sl.outcome, sl.key = classify(err, ctx.Err() != nil, rctx.Err() != nil)
	if err != nil {
		sl.msg = shorten(err.Error(), 160)
	}
	sl.latency = done.Sub(due)
	sl.outcomes++
	if sl.outcome == ledger.OutcomeOK {
		s.okN.Add(1)
	} else {
		s.notOKN.Add(1)
	}
}

// shorten cuts s to at most n bytes, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// storeMax raises m to v if v is larger.
func storeMax(m *atomic.Int64, v int64) {
	for cur := m.Load(); v > cur; cur = m.Load() {
		if m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// row computes the step's figures over its counted requests; call it
// once run has returned.
func (s *step) row() report.SweepRow {
	r := report.SweepRow{Mode: s.mode, Rate: s.rate, Expected: s.total - s.warmup, NonOK: map[string]int{},
		Examples: map[string]string{}, MaxInFlight: int(s.maxInFlight.Load())}
	var lat, lags []float64
	var maxLag time.Duration
	for i := range s.slots {
		sl := &s.slots[i]
		if i < s.warmup {
			if sl.sent && sl.outcome != ledger.OutcomeOK {
				r.WarmupNotOK++
			}
			continue
		}
		if !sl.sent {
			continue
		}
		r.Sent++
		if sl.lag > config.SweepLate {
			r.Late++
		}
		maxLag = max(maxLag, sl.lag)
		lags = append(lags, stats.Ms(sl.lag))
		switch {
		case sl.outcomes == 0:
			r.NoOutcome++
			continue
		case sl.outcomes > 1:
			r.Doubles += sl.outcomes - 1
		}
		switch sl.outcome {
		case ledger.OutcomeOK:
			r.OK++
			lat = append(lat, stats.Ms(sl.latency))
		case ledger.OutcomeLost:
			r.Timeouts++
		default:
			r.Errors++
		}
		if sl.outcome != ledger.OutcomeOK {
			if r.NonOK[sl.key]++; r.NonOK[sl.key] == 1 {
				r.Examples[sl.key] = sl.msg
			}
		}
	}
	r.MaxLagMs = stats.Round3(stats.Ms(maxLag))
	r.Latency, r.Lag = stats.Summarise(lat), stats.Summarise(lags)
	return r
}

// progress prints the step's line once a second until ctx ends.
func (s *step) progress(ctx context.Context, lines *live.Printer) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	prevSent, prevDone := int64(0), int64(0)
	end := s.due(s.total)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			phase, left := "counted", end.Sub(now)
			switch {
			case now.Before(s.due(s.warmup)):
				phase = "warm-up"
			case !now.Before(end):
				phase, left = "finishing", 0
			}
			sent, done := s.sentN.Load(), s.okN.Load()+s.notOKN.Load()
			lines.Line(fmt.Sprintf("[sweep %s] %6g/s  %-9s %3.0fs left  sent %5d/s  done %5d/s  in flight %5d  ok %7d  not ok %5d  late %5d",
				s.mode, s.rate, phase, left.Seconds(), sent-prevSent, done-prevDone, s.inFlight.Load(), s.okN.Load(), s.notOKN.Load(), s.lateN.Load()))
			prevSent, prevDone = sent, done
		}
	}
}

// redisCalls reads the calls of each Redis command so far
// (cluster.RedisCommandCalls).
type redisCalls func(context.Context) (map[string]int64, error)

// meters are what a step measures besides its requests, over its counted
// window; each may be nil (not measured).
type meters struct {
	probe *cluster.Probe // the CPU time of its processes
	redis redisCalls     // the Redis commands
	// mallocs reads the instances' heap allocations so far, summed
	// (cluster.ScrapeMallocs).
	mallocs func(context.Context) (float64, error)
}

// runStep runs one step with its progress line and returns its row, with
// what m measures over the counted window: a figure whose first or last
// read fails is left out.
func runStep(ctx context.Context, cfg config.Config, mode string, rate float64, target target, progress io.Writer, m meters) report.SweepRow {
	s := newStep(mode, rate, config.SweepWarmup, cfg.Duration, cfg.TaskTimeout+cfg.Grace, target)
	lines := live.NewPrinter(progress)
	pctx, stop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { s.progress(pctx, lines) })
	var (
		cpuFrom     []time.Duration
		cpuAt       time.Time
		callsFrom   map[string]int64
		mallocsFrom = -1.0
	)
	bg.Go(func() {
		if !live.SleepUntil(pctx, s.due(s.warmup)) {
			return
		}
		// The CPU first, at the window's opening (/proc, microseconds);
		// the others are network round trips.
		if m.probe != nil {
			cpuFrom, cpuAt = m.probe.Read(), time.Now()
		}
		if m.redis != nil {
			callsFrom, _ = m.redis(pctx) // nil on a failure: not measured
		}
		if m.mallocs != nil {
			if v, err := m.mallocs(pctx); err == nil {
				mallocsFrom = v
			}
		}
	})
	s.run(ctx)
	stop()
	bg.Wait()
	lines.End()
	row := s.row()
	if cpuFrom != nil {
		row.CPU = report.NewStepCPU(m.probe.Procs, cpuFrom, m.probe.Read(), time.Since(cpuAt).Seconds(), row.OK)
	}
	if callsFrom != nil {
		if to, err := m.redis(ctx); err == nil {
			row.Redis = report.NewStepRedis(callsFrom, to, row.OK)
		}
	}
	if mallocsFrom >= 0 && row.OK > 0 {
		if to, err := m.mallocs(ctx); err == nil && to >= mallocsFrom {
			row.InstanceAllocs = stats.Round3((to - mallocsFrom) / float64(row.OK))
		}
	}
	return row
}
