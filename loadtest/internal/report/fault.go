package report

import (
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"slices"
)

// Classes of requests in a run with a fault: what the fault may do to them.
const (
	// ClassVictimTask: sent to a surviving instance, pending at the kill,
	// and its node was connected to the victim and still running it (or no
	// node had started it, and it failed with node_disconnected: its
	// assign was with the victim). It must fail with 502
	// node_disconnected within the bar: losing an instance fails its tasks
	// fast.
	ClassVictimTask = "victim-task"
	// ClassInTransit: like a victim task, but its handler had already
	// returned at the kill, so its result may or may not have left the
	// victim: a result or a 502 within the bar are both right.
	ClassInTransit = "in-transit"
	// ClassVictimRequester: sent to the victim itself and pending at the
	// kill; its client sees the connection drop (a kill takes the HTTP
	// side with it). Any outcome is accepted, but not LOST.
	ClassVictimRequester = "victim-requester"
	// ClassDrainRequester and ClassDrainTask: pending at a SIGTERM, on the
	// draining instance as requester or as the node's owner. A drain loses
	// nothing (invariant 9): they must succeed.
	ClassDrainRequester = "drain-requester"
	ClassDrainTask      = "drain-task"
	// ClassOther: everything else. It must succeed: a fault elsewhere
	// leaves it unaffected.
	ClassOther = "other"
)

// FaultReport says what was injected, where and when.
type FaultReport struct {
	Kind     string  `json:"kind"`                  // none, kill or sigterm
	Skipped  string  `json:"skipped,omitempty"`     // why no fault was injected
	Instance int     `json:"instance"`              // index of the victim
	AtMs     float64 `json:"at_ms,omitempty"`       // when the signal was sent
	InFlight int     `json:"in_flight_on_victim"`   // tasks its nodes ran for other instances' requests then
	WaitedMs float64 `json:"waited_ms,omitempty"`   // past the planned time, waiting for such a task
	ExitMs   float64 `json:"exit_ms,omitempty"`     // sigterm: when the process exited
	ExitErr  string  `json:"exit_status,omitempty"` // sigterm: how it exited
	Rehomed  int     `json:"rehomed_nodes"`         // nodes moved to the survivors
}

// Classify sets the Class of every record relative to a fault at atMs on
// instance victim. With no fault every record is ClassOther.
func Classify(recs []*ledger.Record, f FaultReport) {
	injected := f.Kind != config.FaultNone && f.Skipped == "" && f.AtMs > 0
	for _, r := range recs {
		r.Class = ClassOther
		if !injected {
			continue
		}
		pending := r.SentMs < f.AtMs && (r.DoneMs > f.AtMs || r.Outcome == "")
		// A request no node started that failed with node_disconnected (or,
		// with nothing to notice the loss, timed out) after a kill had its
		// assign with the victim. If it was sent just after the kill, Redis
		// had not yet noticed the victim's subscription go, so the publish
		// still reached "someone".
		lostAssign := f.Kind == config.FaultKill && r.Via != f.Instance && r.NodeInst < 0 && r.Outcome == ledger.OutcomeError &&
			(r.Code == "node_disconnected" || r.Code == "timeout")
		if lostAssign && r.SentMs >= f.AtMs {
			r.Class = ClassVictimTask
			continue
		}
		// Sent to the victim as it died: the clients' rotation drops it at
		// the kill, but a send already on its way still reaches the dead
		// process, and only the kill answers it (seen in a seed run: a
		// transport error 0 ms after the kill).
		if f.Kind == config.FaultKill && r.Via == f.Instance && r.SentMs >= f.AtMs {
			r.Class = ClassVictimRequester
			continue
		}
		if !pending {
			continue
		}
		// A task run again elsewhere after its node was lost was on the
		// victim as much as one that failed there.
		onVictim := r.NodeInst == f.Instance || slices.Contains(r.Earlier, f.Instance)
		switch f.Kind {
		case config.FaultKill:
			switch {
			case r.Via == f.Instance:
				r.Class = ClassVictimRequester
			case onVictim && r.EndMs > 0 && r.EndMs <= f.AtMs:
				r.Class = ClassInTransit
			case onVictim:
				r.Class = ClassVictimTask
			case lostAssign:
				r.Class = ClassVictimTask
			}
		case config.FaultSIGTERM:
			switch {
			case r.Via == f.Instance:
				r.Class = ClassDrainRequester
			case onVictim:
				r.Class = ClassDrainTask
			}
		}
	}
}

// faultWindow is the part of the steady phase the fault disturbs, in ms:
// from the signal until Settle after the instance was gone (for a drain,
// after it exited) and its nodes had moved.
func faultWindow(f FaultReport, settleMs float64) (from, to float64, ok bool) {
	if f.Kind == config.FaultNone || f.Skipped != "" || f.AtMs <= 0 {
		return 0, 0, false
	}
	end := max(f.AtMs, f.ExitMs)
	return f.AtMs, end + settleMs, true
}
