package nodes

import (
	"errors"
	"fmt"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// A node's state, set by an operator or by its own account (POST
// /api/v1/nodes/{id}/pause, /resume, /drain). A node that is not serving
// takes no new task: it counts no free slot, so requests for its task type
// go to other nodes, or wait for a slot as they would for a busy node, and
// its running tasks finish. A draining node is closed with 1001 once it
// holds none.
const (
	StateServing  = "serving"
	StatePaused   = "paused"
	StateDraining = "draining"
)

// The actions on a node's state.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionDrain  = "drain"
)

// ErrUnknownAction is the answer to an action that is none of the three.
var ErrUnknownAction = errors.New("nodes: unknown action: use pause, resume or drain")

// ErrNotHere is the answer to an action on a node this instance does not hold.
var ErrNotHere = errors.New("nodes: the node is not connected here")

// nodeState is a session's state and why (operators see the reason).
type nodeState struct {
	state, reason string
}

// State returns the node's state and the reason it was given.
func (s *Session) State() (state, reason string) {
	if st := s.state.Load(); st != nil {
		return st.state, st.reason
	}
	return StateServing, ""
}

// serving reports whether the node takes new tasks.
func (s *Session) serving() bool {
	st := s.state.Load()
	return st == nil || st.state == StateServing
}

// Control pauses, resumes or drains a node held here, with reason for the
// operators. It returns the node as listed afterwards.
func (h *Hub) Control(nodeID, action, reason string) (NodeView, error) {
	s := h.Session(nodeID)
	if s == nil {
		return NodeView{}, ErrNotHere
	}
	switch action {
	case ActionPause:
		s.state.Store(&nodeState{StatePaused, reason})
	case ActionDrain:
		s.state.Store(&nodeState{StateDraining, reason})
	case ActionResume:
		s.state.Store(nil)
	default:
		return NodeView{}, fmt.Errorf("%w: %q", ErrUnknownAction, action)
	}
	h.log.Info("node state changed by request", "node_id", nodeID, "action", action, "reason", reason)
	h.cfg.Changes.Mark(nodeID)
	switch action {
	case ActionResume:
		h.localSlotsFreed(s, s.FreeSlots())
	case ActionDrain:
		s.closeIfDrained()
	}
	return s.View(h.cfg.Instance), nil
}

// closeIfDrained closes a draining node that holds no task.
func (s *Session) closeIfDrained() {
	if st := s.state.Load(); st != nil && st.state == StateDraining && s.InFlight() == 0 {
		s.Close(wire.CloseDraining, "drained by an operator")
	}
}
