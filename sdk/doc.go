// Package sdk is switchyard's Go client library.
//
// It owns:
//   - the node agent (Node, NodeConfig, Handler): it dials the node
//     WebSocket, registers, runs each assigned task under a context that a
//     task_cancel ends, sends chunks and results, heartbeats with the host's
//     load (cpu.go), and reconnects with backoff (1 s to 60 s), or when a
//     coordinator that shed its registration says (retry_after_ms), until the
//     server refuses its key or another connection of the same identity
//     replaces it — GemmaNet's Python SDK's rules;
//   - the HTTP API client (Client): plain and streaming (SSE) requests,
//     ratings, status, nodes and task lookups, with the server's error body
//     decoded into an error that carries its code (apierror.go);
//   - VerifyWebhook (webhook.go), which checks a webhook delivery's
//     Switchyard-Signature for a receiver;
//   - StreamTask, which follows an async task's resumable stream and
//     reconnects with Last-Event-ID and backoff across cuts (stream_task.go);
//   - the node's side of the wire protocol, which package sdk/wire
//     defines once for the SDK and the coordinator: GemmaNet's protocol plus
//     switchyard's extensions (max_concurrency in node_register, and
//     features: ["task_cancel"] there, which asks for task_cancel; status
//     "rejected" for a task_assign it cannot decode), as docs/PROTOCOL.md
//     documents them. Of its names, the SDK's API shows Usage, ErrorPayload
//     and MaxMessageBytes (protocol.go);
//   - resumed streams, for a node whose user sets NodeConfig.Resume: it
//     then also declares features: ["resume"], and the coordinator may hand
//     it a stream whose node went away after the client had part of it.
//     The handler finds that part in Task.Resume and must emit, and return,
//     only what follows it. A node that did not set Resume refuses such an
//     assignment with status "rejected" (the coordinator never sends one):
//     running it from the start would repeat to the client what it has;
//   - a handler error that wraps ErrUnavailable answers status
//     "unavailable": this node, not the request, failed, and the
//     coordinator runs the task again on another node.
//
// It must not import any other switchyard package but sdk/wire, which
// imports only the standard library: the SDK is what third parties link
// against, and the CLI's `switchyard node` and the load test use it as an
// outside client would, so the tests built on it exercise the public
// protocol rather than the server's internals. Ready-made handlers live in
// sdk/handlers; the examples show a node and a streaming request.
package sdk
