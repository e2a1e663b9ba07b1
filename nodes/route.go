package nodes

import (
	"context"
	"errors"
)

// Routing hints the dispatcher gives its directory. The cluster directory
// acts on them (ClusterDirectory.MarkFull and friends); one instance's Hub
// sees its own nodes exactly, so they are no-ops here. Declared as methods,
// not probed for, so a directory that forgets one does not compile.

// Hidden implements the dispatcher's directory: the Hub hides no nodes.
func (h *Hub) Hidden(capability string) bool { return false }

// MarkFull implements the dispatcher's directory: the Hub reads each
// session's free slots directly.
func (h *Hub) MarkFull(nodeID string) {}

// MarkGone implements the dispatcher's directory: the Hub lists only this
// instance's nodes.
func (h *Hub) MarkGone(instance string) {}

// Reserve implements the dispatcher's directory: the Hub's slot counts are
// exact, and its nodes' sessions take the slot themselves.
func (h *Hub) Reserve(nodeID string) (release func(), ok bool) { return noRelease, true }

func noRelease() {}

// ErrNoRemote is the Hub's answer to Refresh: it has no other instance's
// nodes to read again.
var ErrNoRemote = errors.New("nodes: no remote directory to read")

// Refresh implements the dispatcher's directory: the Hub's view of its own
// nodes is always current.
func (h *Hub) Refresh(context.Context) error { return ErrNoRemote }
