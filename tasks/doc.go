// Package tasks moves a task from the request that asked for it to the
// node that runs it, and its chunks and result back.
//
// The requester side (Dispatcher and Tracker) lives where the HTTP request
// landed: it picks a node, sends an assign, and waits, with the deadline,
// for the outcome. The owner side (Owner and its forwarding table) lives
// where the node's socket is: it admits or refuses the assign, and lets
// only the assigned connection answer. The two talk through a bus.Bus, or
// directly when they are the same instance (the fast path). The Watcher
// notices when the other side's instance is gone.
//
// This package owns the task error kinds and their HTTP status. It opens
// no sockets and knows no HTTP routes.
package tasks
