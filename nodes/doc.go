// Package nodes owns the node side of an instance: one Session per node
// WebSocket (a reader loop and one writer goroutine behind a bounded queue),
// the set of local sessions (Hub), the node's handshake and its limits,
// cluster ownership of node identities (Claims: fenced, newest wins), the
// directory routing reads, and node selection.
//
// It speaks the node wire protocol (JSON envelopes, see docs/PROTOCOL.md)
// but knows nothing of HTTP routes, tasks or Redis key names: a session
// hands task events to the Events it was given, and ownership and the
// directory are interfaces with in-memory implementations here.
package nodes
