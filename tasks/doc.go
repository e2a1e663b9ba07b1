// Package tasks moves a task from the request that asked for it to the
// node that runs it, and its chunks and result back.
//
// It owns one component, the Engine (New), built whole at construction:
//
//   - the requester side (dispatcher.go, tracker.go) lives where the HTTP
//     request landed: it picks a node, sends an assign, and waits, with the
//     deadline, for the outcome; it records every task once (record.go),
//     and counts it in the operator's figures (stats.go: latency
//     histograms, errors and the last failures over five minutes);
//   - the owner side (owner.go, forward.go) lives where the node's socket
//     is: it admits or refuses the assign, and lets only the assigned
//     connection answer; its forwarding table is a state machine in which
//     whoever takes an entry has the last word;
//   - the watcher (watcher.go) notices when the other side's instance is
//     gone; the outbound queue (outbound.go) publishes what the bus handler
//     must answer, so that handler never blocks.
//
// The two sides talk through a bus (Deps.Bus), or directly when they are
// the same instance (the fast path). Everything the Engine uses comes in
// through Deps as small interfaces declared here; the Engine starts its
// goroutines in its Run and waits for them there. It owns the task error codes (Code)
// and their HTTP status, and the outcome statuses (Status).
//
// It must not open sockets, know HTTP routes or Redis key names, subscribe
// to the bus itself (the App routes envelopes to HandleEnvelope), or close
// node sockets for ownership reasons (replace is the nodes.Hub's).
package tasks
