package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/fleet"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/live"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
	"github.com/switchyard-dev/switchyard/sdk"
)

// runner drives one configuration: the ramp, the steady phase with its
// streams, the fault, and the progress line.
type runner struct {
	cfg      config.Config
	c        *cluster.Cluster
	ledger   *ledger.Ledger
	fleet    *fleet.Nodes
	sampler  *cluster.Sampler
	progress io.Writer
	lines    *live.Printer // progress lines
	t0       time.Time

	hc      *http.Client
	clients [][]*sdk.Client // [instance][client key]
	alive   atomic.Pointer[[]int]
	rr      atomic.Uint64 // round robin over instances and keys
	wg      sync.WaitGroup

	phase         atomic.Pointer[string]
	phaseStart    atomic.Int64 // unix nanos
	streamsActive atomic.Int64
	maxLag        atomic.Int64 // worst lateness of a scheduled send, ns
	signalled     atomic.Int64 // index+1 of the instance the fault signalled

	// The fleet profile's hooks: called when the steady phase (its loaded
	// window) starts and ends, and for more figures on the progress line.
	onSteadyStart, onSteadyEnd func()
	extra                      func() string

	mu       sync.Mutex
	fault    report.FaultReport
	events   []report.Event
	marks    report.Phases
	counters map[string]map[string]float64 // instance name → switchyard counters at the end
}

func newRunner(cfg config.Config, c *cluster.Cluster, l *ledger.Ledger, f *fleet.Nodes, s *cluster.Sampler, progress io.Writer, t0 time.Time) *runner {
	r := &runner{cfg: cfg, c: c, ledger: l, fleet: f, sampler: s, progress: progress, t0: t0,
		counters: map[string]map[string]float64{}}
	r.lines = live.NewPrinter(progress)
	// Enough idle connections that a steady 100/s never opens new ones.
	r.hc = &http.Client{Transport: &http.Transport{
		MaxIdleConns: 4096, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second,
	}}
	for _, in := range c.Instances() {
		var row []*sdk.Client
		for _, k := range c.ClientKeys() {
			row = append(row, sdk.NewClient(in.URL, k, sdk.WithHTTPClient(r.hc)))
		}
		r.clients = append(r.clients, row)
	}
	all := make([]int, len(c.Instances()))
	for i := range all {
		all[i] = i
	}
	r.alive.Store(&all)
	r.setPhase("setup")
	return r
}

func (r *runner) since(t time.Time) float64 { return stats.Round3(t.Sub(r.t0).Seconds()) }

func (r *runner) event(format string, args ...any) {
	r.mu.Lock()
	r.events = append(r.events, report.Event{T: r.since(time.Now()), What: fmt.Sprintf(format, args...)})
	r.mu.Unlock()
}

func (r *runner) setPhase(p string) {
	r.phase.Store(&p)
	r.phaseStart.Store(time.Now().UnixNano())
}

// pick chooses the instance and key of the next request: round robin over
// the instances still in rotation.
func (r *runner) pick() (via, key int) {
	i := r.rr.Add(1)
	alive := *r.alive.Load()
	return alive[i%uint64(len(alive))], int(i % uint64(len(r.c.ClientKeys())))
}

// send runs one request to its outcome and records it; it reports
// whether the outcome was ok.
func (r *runner) send(ctx context.Context, kind, phase string) bool {
	via, key := r.pick()
	rec := r.ledger.Open(kind, phase, via, time.Now())
	limit := r.cfg.TaskTimeout + r.cfg.Grace
	taskType := r.fleet.Plain()
	if kind == ledger.KindStream {
		limit += r.cfg.StreamLength * 11 / 10
		taskType = r.fleet.Stream()
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req := sdk.Request{TaskType: taskType, Content: ledger.Content(rec.ID)}
	cl := r.clients[via][key]
	var res *sdk.TaskResult
	var err error
	chunks := 0
	if kind == ledger.KindStream {
		res, err = cl.Stream(rctx, req, func(string) error { chunks++; return nil })
	} else {
		res, err = cl.Request(rctx, req)
	}
	a := classifyAnswer(res, err, chunks, ctx.Err() != nil, rctx.Err() != nil)
	r.ledger.Close(rec, time.Now(), a)
	return a.Outcome == ledger.OutcomeOK
}

// classifyAnswer turns what the client got into an ledger.Answer. aborted: the
// load test was interrupted; expired: the request's own deadline (its task
// deadline plus the grace period) passed.
func classifyAnswer(res *sdk.TaskResult, err error, chunks int, aborted, expired bool) ledger.Answer {
	var apiErr *sdk.APIError
	switch {
	case err == nil && res.Status == "completed":
		return ledger.Answer{Outcome: ledger.OutcomeOK, Status: 200, ProcMs: res.ProcessingTimeMs, NodeID: res.NodeID, Chunks: chunks, Attempts: res.Attempts}
	case err == nil:
		return ledger.Answer{Outcome: ledger.OutcomeFailed, Status: 200, Code: res.Status, Message: res.Result, ProcMs: res.ProcessingTimeMs, NodeID: res.NodeID, Chunks: chunks, Attempts: res.Attempts}
	case errors.As(err, &apiErr):
		return ledger.Answer{Outcome: ledger.OutcomeError, Status: apiErr.Status, Code: apiErr.Code, Message: apiErr.Message, Chunks: chunks}
	case aborted:
		return ledger.Answer{Outcome: ledger.OutcomeAborted, Message: err.Error(), Chunks: chunks}
	case expired:
		return ledger.Answer{Outcome: ledger.OutcomeLost, Message: "no outcome by the deadline plus the grace period", Chunks: chunks}
	default:
		return ledger.Answer{Outcome: ledger.OutcomeError, Code: ledger.CodeTransport, Message: err.Error(), Chunks: chunks}
	}
}

// run drives the phases and returns when every request has its outcome.
func (r *runner) run(ctx context.Context) {
	pctx, stopProgress := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { r.progressLoop(pctx) })
	for _, in := range r.c.Instances() {
		if in.Done() == nil {
			continue
		}
		bg.Go(func() {
			select {
			case <-in.Done():
				if int(r.signalled.Load()) != in.Index+1 {
					r.event("%s exited unexpectedly (%v); its log: %s", in.Name, in.Err(), in.Log)
				}
			case <-pctx.Done():
			}
		})
	}
	defer func() {
		stopProgress()
		bg.Wait()
		r.hc.CloseIdleConnections()
	}()

	// Counters are reported as the run's own: the end minus the start
	// (a --target instance may have served other runs before).
	before := r.scrapeAll(ctx)

	rampStart := time.Now()
	steadyStart := rampStart.Add(r.cfg.Ramp)
	steadyEnd := steadyStart.Add(r.cfg.Duration)
	r.mu.Lock()
	r.marks.RampStart, r.marks.SteadyStart, r.marks.SteadyEnd = r.since(rampStart), r.since(steadyStart), r.since(steadyEnd)
	r.mu.Unlock()

	// Ramp: closed-loop workers, one more every Ramp/RampTo, each sending
	// its next request as soon as the last one ends. They stop at the end
	// of the ramp; their last requests overlap the steady phase's start.
	if r.cfg.RampTo > 0 {
		r.setPhase(ledger.PhaseRamp)
		for j := range r.cfg.RampTo {
			at := rampStart.Add(r.cfg.Ramp * time.Duration(j) / time.Duration(r.cfg.RampTo))
			r.wg.Go(func() {
				if !live.SleepUntil(ctx, at) {
					return
				}
				for time.Now().Before(steadyStart) && ctx.Err() == nil {
					r.send(ctx, ledger.KindPlain, ledger.PhaseRamp)
				}
			})
		}
	}
	if !live.SleepUntil(ctx, steadyStart) {
		r.wg.Wait()
		return
	}

	if r.onSteadyStart != nil {
		r.onSteadyStart()
	}
	r.setPhase(ledger.PhaseSteady)
	r.event("steady phase: %g requests/s for %v, %d streams", r.cfg.Rate, r.cfg.Duration, r.cfg.Streams)
	for j := range r.cfg.Streams {
		at := steadyStart.Add(r.cfg.StreamLength * time.Duration(j) / time.Duration(r.cfg.Streams))
		r.wg.Go(func() {
			if !live.SleepUntil(ctx, at) {
				return
			}
			for time.Now().Before(steadyEnd) && ctx.Err() == nil {
				r.streamsActive.Add(1)
				ok := r.send(ctx, ledger.KindStream, ledger.PhaseSteady)
				r.streamsActive.Add(-1)
				if !ok {
					// A client whose stream failed pauses before the next,
					// rather than spinning on an error that answers at once.
					live.SleepUntil(ctx, time.Now().Add(250*time.Millisecond))
				}
			}
		})
	}
	var faultWG sync.WaitGroup
	if r.fault.Kind != config.FaultNone && r.fault.Skipped == "" {
		faultWG.Go(func() { r.injectFault(ctx, steadyStart.Add(r.cfg.FaultAt), steadyEnd) })
	}

	// Open loop: request i leaves at steadyStart + i/Rate whether or not
	// the earlier ones have ended.
	interval := time.Duration(float64(time.Second) / r.cfg.Rate)
	for i := 0; ; i++ {
		at := steadyStart.Add(time.Duration(i) * interval)
		if !at.Before(steadyEnd) || !live.SleepUntil(ctx, at) {
			break
		}
		if lag := time.Since(at); lag > time.Duration(r.maxLag.Load()) {
			r.maxLag.Store(int64(lag))
		}
		r.wg.Go(func() { r.send(ctx, ledger.KindPlain, ledger.PhaseSteady) })
	}
	live.SleepUntil(ctx, steadyEnd)
	if r.onSteadyEnd != nil {
		r.onSteadyEnd()
	}
	r.setPhase("finishing")
	r.event("steady phase ends; waiting for the requests still running")
	faultWG.Wait()
	r.wg.Wait()
	r.mu.Lock()
	r.marks.End = r.since(time.Now())
	r.mu.Unlock()
	after := r.scrapeAll(ctx)
	r.mu.Lock()
	for name, m := range after {
		for k, v := range m {
			if d := v - before[name][k]; d != 0 {
				if r.counters[name] == nil {
					r.counters[name] = map[string]float64{}
				}
				r.counters[name][k] = d
			}
		}
	}
	r.mu.Unlock()
}

// scrapeAll reads the counters of every instance still running.
func (r *runner) scrapeAll(ctx context.Context) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, in := range r.c.Instances() {
		if in.Exited() {
			continue
		}
		if m, err := cluster.ScrapeCounters(ctx, r.hc, in.URL); err == nil {
			out[in.Name] = m
		}
	}
	return out
}

// progressLoop prints one line a second until ctx ends.
func (r *runner) progressLoop(ctx context.Context) {
	if r.progress == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	prev := r.ledger.Counts()
	n := len(r.c.Instances())
	for {
		select {
		case <-ctx.Done():
			r.lines.End()
			return
		case <-t.C:
		}
		cur := r.ledger.Counts()
		elapsed := time.Since(time.Unix(0, r.phaseStart.Load())).Round(time.Second)
		r.mu.Lock()
		fault := ""
		if r.fault.AtMs > 0 {
			fault = fmt.Sprintf("  %s %s at %.1fs", r.fault.Kind, r.c.Instances()[r.fault.Instance].Name, r.fault.AtMs/1000)
		}
		r.mu.Unlock()
		phase := *r.phase.Load()
		if r.cfg.Fleet && phase == ledger.PhaseSteady {
			phase = "loaded" // the fleet profile's name for its steady phase
		}
		line := fmt.Sprintf("[%d instance%s] %-9s %6v  sent %4d/s  done %4d/s  in flight %4d  streams %3d  ok %6d  errors %4d  lost %d%s",
			n, report.Plural(n), phase, elapsed, cur.Sent-prev.Sent, (cur.OK+cur.NotOK)-(prev.OK+prev.NotOK),
			cur.InFlight, r.streamsActive.Load(), cur.OK, cur.NotOK-cur.Lost, cur.Lost, fault)
		if r.extra != nil {
			line += "  " + r.extra()
		}
		r.lines.Line(line)
		prev = cur
	}
}
