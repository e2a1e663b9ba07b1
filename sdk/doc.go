// Package sdk is switchyard's Go client library: the node agent that serves
// tasks over the node WebSocket (Node, Handler) and the HTTP API client
// (Client).
//
// It speaks GemmaNet's wire protocol plus switchyard's extensions
// (max_concurrency in node_register, task_cancel, status "rejected" for a
// task_assign it cannot decode), as documented in the
// project's PROTOCOL.md, and behaves like GemmaNet's Python SDK: the same
// registration, heartbeat, reconnect backoff and stop rules.
//
// The package owns its own copy of the wire shapes (wire.go) and must not
// import any other switchyard package: it is what third parties link against,
// and the load test uses it as an outside client would.
// Ready-made handlers live in sdk/handlers; the examples show a node and a
// streaming request.
package sdk
