package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/live"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
	"github.com/switchyard-dev/switchyard/sdk"
)

// sweepTarget is what a sweep step sends its requests to: the embedded
// NATS baseline or a switchyard instance.
type sweepTarget interface {
	// do sends one request whose content is body and returns what came
	// back (an echo, for the step to compare with body), or why nothing
	// did: a *sweepError or an *sdk.APIError for an explicit answer that
	// is not an echo, else a transport error or ctx's.
	do(ctx context.Context, body string) (string, error)
}

// sweepError is an explicit answer that is not an echo: a failed task, no
// responders, an echo of something else.
type sweepError struct {
	Status  int // HTTP status, 0 when there is none
	Code    string
	Message string
}

func (e *sweepError) Error() string { return e.Code + ": " + e.Message }

// classifySweep turns what do returned into an outcome and, for a non-ok
// one, the key it is counted under ("503 nodes_busy", "timeout"…).
// aborted: the load test was interrupted; expired: the request's own
// deadline (the task timeout plus the grace period) passed.
func classifySweep(err error, aborted, expired bool) (outcome, key string) {
	var api *sdk.APIError
	var se *sweepError
	switch {
	case err == nil:
		return ledger.OutcomeOK, ""
	case errors.As(err, &api):
		return ledger.OutcomeError, fmt.Sprintf("%d %s", api.Status, api.Code)
	case errors.As(err, &se) && se.Status != 0:
		return ledger.OutcomeError, fmt.Sprintf("%d %s", se.Status, se.Code)
	case errors.As(err, &se):
		return ledger.OutcomeError, se.Code
	case aborted:
		return ledger.OutcomeAborted, ledger.OutcomeAborted
	case expired:
		return ledger.OutcomeLost, "timeout"
	default:
		return ledger.OutcomeError, ledger.CodeTransport
	}
}

// sweepSlot is one request of a step. Only the request's own goroutine
// writes it; the step reads it once it has waited for them all.
type sweepSlot struct {
	sent     bool
	lag      time.Duration // from its due time until it went out
	latency  time.Duration // from its due time until its outcome
	outcome  string
	key      string // a non-ok outcome's, see classifySweep
	msg      string // a non-ok outcome's error, shortened
	outcomes int    // outcomes written: exactly one once the step has ended
}

// sweepStep is one rate of one mode: an open-loop generator, where
// request i is due at start + i/rate whatever happened to the others.
type sweepStep struct {
	mode   string
	rate   float64
	warmup int           // the first warmup requests are not counted
	total  int           // requests due, the warm-up's included
	limit  time.Duration // each request's deadline from when it goes out
	target sweepTarget
	start  time.Time
	slots  []sweepSlot

	wg                    sync.WaitGroup
	inFlight, maxInFlight atomic.Int64
	sentN, okN, notOKN    atomic.Int64 // for the progress line
	lateN                 atomic.Int64
}

// newSweepStep prepares a step that starts now: warmup at rate, not
// counted, then counted at rate.
func newSweepStep(mode string, rate float64, warmup, counted, limit time.Duration, target sweepTarget) *sweepStep {
	warm := int(math.Round(rate * warmup.Seconds()))
	total := warm + int(math.Round(rate*counted.Seconds()))
	return &sweepStep{mode: mode, rate: rate, warmup: warm, total: total, limit: limit, target: target,
		start: time.Now(), slots: make([]sweepSlot, total)}
}

// due is when request i is to go out.
func (s *sweepStep) due(i int) time.Time {
	return s.start.Add(time.Duration(float64(i) * float64(time.Second) / s.rate))
}

// run sends every request at its due time and returns once each has its
// outcome (or ctx has ended and the rest were never sent). The
// scheduler wakes for the next due time and launches every request due
// by then, each in its own goroutine: after a late wake-up the overdue
// ones go out at once, and no request ever waits for another's answer.
// Their latencies count from the due time, so a generator that fell
// behind shows as latency and as late sends, never as a lighter load.
func (s *sweepStep) run(ctx context.Context) {
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
func (s *sweepStep) send(ctx context.Context, i int) {
	slot := &s.slots[i]
	due := s.due(i)
	rctx, cancel := context.WithTimeout(ctx, s.limit)
	defer cancel()
	body := ledger.Content(int64(i))
	storeMax(&s.maxInFlight, s.inFlight.Add(1))
	sent := time.Now()
	slot.sent, slot.lag = true, sent.Sub(due)
	s.sentN.Add(1)
	if slot.lag > config.SweepLate {
		s.lateN.Add(1)
	}
	echo, err := s.target.do(rctx, body)
	done := time.Now()
	s.inFlight.Add(-1)
	if err == nil && echo != body {
		err = &sweepError{Code: "wrong_echo", Message: fmt.Sprintf("sent %q, got %.40q", body, echo)}
	}
	slot.outcome, slot.key = classifySweep(err, ctx.Err() != nil, rctx.Err() != nil)
	if err != nil {
		slot.msg = shorten(err.Error(), 160)
	}
	slot.latency = done.Sub(due)
	slot.outcomes++
	if slot.outcome == ledger.OutcomeOK {
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
func (s *sweepStep) row() report.SweepRow {
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
func (s *sweepStep) progress(ctx context.Context, lines *live.Printer) {
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

// runSweepStep runs one step with its progress line and returns its row.
func runSweepStep(ctx context.Context, cfg config.Config, mode string, rate float64, target sweepTarget, progress io.Writer) report.SweepRow {
	s := newSweepStep(mode, rate, config.SweepWarmup, cfg.Duration, cfg.TaskTimeout+cfg.Grace, target)
	lines := live.NewPrinter(progress)
	pctx, stop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { s.progress(pctx, lines) })
	s.run(ctx)
	stop()
	bg.Wait()
	lines.End()
	return s.row()
}
