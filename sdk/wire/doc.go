// Package wire is the node protocol of docs/PROTOCOL.md, defined once for
// both of its ends: the coordinator's (nodes, tasks) and the Go SDK's node
// agent (sdk), as well as the test servers that stand in for the
// coordinator.
//
// It owns:
//   - the envelope every message travels in, and encoding and decoding it
//     (envelope.go): DecodeEnvelope as the coordinator reads a node's
//     frame, ParseEnvelope as the SDK reads the coordinator's;
//   - the message types, the payload of each (payloads.go), and the codes
//     and limits of the protocol: close codes, error codes, result
//     statuses, features, the message size limit (codes.go);
//   - the coordinator's readings of what nodes send (decode.go): lenient
//     where GemmaNet's nodes need it (heartbeat, benchmark_result,
//     task_result's informational fields), strict where the protocol is
//     (task_chunk and task_result need their task_id), every error wrapping
//     ErrInvalidMessage with text fit to send back to the node.
//
// The rules of node_register (limits, name rules) are the coordinator's
// policy and live in nodes. This package imports only the standard library
// and no other switchyard package, so that sdk, which third parties import,
// can import it.
package wire
