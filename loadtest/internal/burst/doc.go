// Package burst is the burst profile: a burst of nodes connecting at
// once to one instance, twice, each time on a fresh instance. First the
// Go SDK's nodes (sdk.Node, which waits out the retry_after_ms that a
// shed registration's close 1013 carries), timed until every one has
// registered and the instance lists them all; then as many naive clients
// (naive.go: node_register, and on any refusal or drop a new connection
// at once, no backoff, no hint), counted after --duration. Each phase
// reads the instance's handshake refusals (the 1013 sheds among them)
// from its /metrics.
//
// It measures; it must not judge (report.EvaluateBurst does).
package burst
