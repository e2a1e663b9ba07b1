package load

import (
	"context"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/live"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// injectFault waits until at, then until a node of the victim is running a
// task for a request sent to another instance (so that the kill has
// something to prove), takes the victim out of the clients' rotation (as a
// load balancer would) and signals it. Unless --fault-instance names it,
// the victim is the instance whose nodes run the most such tasks: routing
// prefers local nodes, so cross-instance tasks may flow one way only. The
// wait ends at FaultWait, or a second before the end of the steady phase:
// the fault must strike under load.
func (r *runner) injectFault(ctx context.Context, at, steadyEnd time.Time) {
	if !live.SleepUntil(ctx, at) {
		return
	}
	waitUntil := at.Add(r.cfg.FaultWait)
	if last := steadyEnd.Add(-time.Second); waitUntil.After(last) {
		waitUntil = last
	}
	v, inFlight := r.fault.Instance, 0
	for {
		if r.cfg.FaultInstance > 0 {
			inFlight = r.ledger.RunningOn(v)
		} else {
			for i := range r.c.Instances() {
				if n := r.ledger.RunningOn(i); n > inFlight {
					v, inFlight = i, n
				}
			}
		}
		if inFlight > 0 || !time.Now().Before(waitUntil) {
			break
		}
		if !live.SleepUntil(ctx, time.Now().Add(2*time.Millisecond)) {
			return
		}
	}
	r.mu.Lock()
	r.fault.Instance = v
	r.mu.Unlock()
	var rest []int
	for _, i := range *r.alive.Load() {
		if i != v {
			rest = append(rest, i)
		}
	}
	r.alive.Store(&rest)
	in := r.c.Instances()[v]
	r.signalled.Store(int64(v + 1))
	// The fault's time is taken before the signal, so everything it causes
	// comes after it: a client of the victim can see its connection drop
	// before kill returns here, and must not count as sent and done before
	// the fault.
	now := time.Now()
	var err error
	if r.fault.Kind == config.FaultKill {
		err = in.Kill()
	} else {
		err = in.Terminate()
	}
	r.mu.Lock()
	r.fault.AtMs = r.ledger.Ms(now)
	r.fault.InFlight = inFlight
	r.fault.WaitedMs = stats.Round3(float64(now.Sub(at).Microseconds()) / 1000)
	r.mu.Unlock()
	if err != nil {
		r.event("could not signal %s: %v", in.Name, err)
		return
	}
	if r.fault.Kind == config.FaultKill {
		r.sampler.MarkGone(v)
		r.event("kill -9 %s (pid %d); %d tasks of other instances' requests running on its nodes", in.Name, in.PID, inFlight)
	} else {
		r.event("SIGTERM %s (pid %d): drain; %d tasks of other instances' requests running on its nodes", in.Name, in.PID, inFlight)
		// Its nodes stay until the drain closes their sockets; they move
		// once the process is gone (the load balancer stops sending them
		// there).
		select {
		case <-in.Done():
		case <-ctx.Done():
			return
		}
		r.mu.Lock()
		r.fault.ExitMs = r.ledger.Ms(time.Now())
		r.fault.ExitErr = "exit status 0"
		if in.Err() != nil {
			r.fault.ExitErr = in.Err().Error()
		}
		r.mu.Unlock()
		r.event("%s exited after draining (%s)", in.Name, r.fault.ExitErr)
	}
	if r.cfg.NoRehome {
		return
	}
	moved := len(r.fleet.HomedOn(v))
	if err := r.fleet.Rehome(ctx, v, rest); err != nil {
		r.event("re-homing %s's nodes failed: %v", in.Name, err)
	}
	r.mu.Lock()
	r.fault.Rehomed = moved
	r.mu.Unlock()
	r.event("%d nodes of %s reconnect to the other instances in 0.5–1 s", moved, in.Name)
}
