// Package nodes owns the node side of an instance:
//   - one Session per node WebSocket: a reader loop and one writer goroutine
//     behind a bounded send queue that drops a node too slow to keep up
//     (invariant 13), speaking the node protocol that sdk/wire defines for
//     both its ends (docs/PROTOCOL.md: envelope, message types, payloads,
//     codes and their decoding), and the validation of node_register, which
//     is this coordinator's policy (register.go);
//   - the Hub, the set of this instance's sessions: the handshake, the
//     per-account node cap, the benchmark probe (bench.go), drain;
//   - cluster ownership of node identities (Claims: MemoryClaims, and
//     RedisClaims with fenced generations, newest wins; invariant 1);
//   - the directory routing reads (Directory: the Hub for one instance,
//     ClusterDirectory for a cluster) and node selection (select.go).
//
// It knows the Redis keys of what it owns and no others: the claim keys
// {ns}:node:{<id>}:gen, {ns}:node:{<id>}:owner, {ns}:acct:{<id>}:nodes and
// {ns}:inst:{<iid>}:claims (claims_redis.go), the directory hash
// {ns}:dir:{<iid>} and its change feed, the channel {ns}:dir:events
// (cluster.go, dirwrite.go, dirfeed.go).
//
// It must not know HTTP (server accepts the WebSocket and hands the Hub a
// connection) or tasks (a session hands task traffic to the Events it was
// given, which tasks implements). Of bus it uses only DefaultNamespace:
// envelopes between instances are the tasks package's business.
package nodes
