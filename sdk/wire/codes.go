package wire

// MsgType names a message: the envelope's msg_type.
type MsgType string

// Message types (docs/PROTOCOL.md): GemmaNet's, and ours.
const (
	MsgNodeRegister    MsgType = "node_register"    // node → server, the first message
	MsgNodeRegistered  MsgType = "node_registered"  // server → node, always its first message
	MsgError           MsgType = "error"            // server → node
	MsgHeartbeat       MsgType = "heartbeat"        // node → server
	MsgTaskAssign      MsgType = "task_assign"      // server → node
	MsgTaskChunk       MsgType = "task_chunk"       // node → server
	MsgTaskResult      MsgType = "task_result"      // node → server
	MsgTaskCancel      MsgType = "task_cancel"      // server → node; ours, only to nodes that declared FeatureTaskCancel (GemmaNet's SDK cannot parse it)
	MsgBenchmark       MsgType = "benchmark"        // server → node
	MsgBenchmarkResult MsgType = "benchmark_result" // node → server
)

// Features a node may declare in node_register's "features" (ours): the
// extensions of the protocol it understands. GemmaNet's SDK declares none,
// so it is sent nothing it cannot parse; the coordinator ignores names it
// does not know, so a newer node can declare newer ones.
const (
	// FeatureTaskCancel: the node understands task_cancel. A node that does
	// not declare it is never sent one; its slot stays taken by a cancelled
	// task until it answers the task or the task's timeout passes.
	FeatureTaskCancel = "task_cancel"
	// FeatureResume: the node can continue a stream that another node
	// began (task_assign's ResumeText). Only such a node is ever sent a
	// resume_text, and only on a streaming assignment.
	FeatureResume = "resume"
)

// ErrorCode is the code of an `error` message (ErrorPayload.Code).
type ErrorCode string

// The codes the coordinator sends in an `error` message.
const (
	CodeInvalidRegistration ErrorCode = "invalid_registration" // node_register missing, late or invalid; close 1008 follows
	CodeAuthFailed          ErrorCode = "auth_failed"          // unknown or revoked key; close 4001 follows
	CodeTooManyNodes        ErrorCode = "too_many_nodes"       // the account's node cap; close 1008 follows
	CodeInvalidMessage      ErrorCode = "invalid_message"      // a message that cannot be read; the connection stays open
	CodeUnexpectedMessage   ErrorCode = "unexpected_message"   // an unknown msg_type or a second node_register
	// CodeUnavailable is never sent during registration (GemmaNet's SDK
	// stops for good on any error there; a bare 1013 makes it retry).
	CodeUnavailable ErrorCode = "unavailable"
)

// ResultStatus is a task_result's status.
type ResultStatus string

// Task result statuses. Anything but completed fails the task.
const (
	StatusCompleted ResultStatus = "completed"
	StatusFailed    ResultStatus = "failed" // the handler failed (or panicked); result says why
	// StatusRejected (ours) says the node could not read the task_assign (a
	// params value it cannot decode, say): the request's fault, not the
	// handler's, so it is not held against the node. result says why.
	StatusRejected ResultStatus = "rejected"
	// StatusUnavailable (ours) says the node, not the request, failed the
	// task (out of memory, its model not loaded, shutting down): the
	// coordinator runs it again on another node. result says why.
	StatusUnavailable ResultStatus = "unavailable"
)

// Close codes of the node WebSocket. They are untyped so that they are the
// WebSocket library's status type where one is needed (this package
// imports none) and an int where not.
const (
	CloseNormal        = 1000
	CloseDraining      = 1001 // the instance is draining (or shutting down): reconnect, elsewhere
	CloseUnsupported   = 1003 // a binary frame
	ClosePolicy        = 1008 // invalid registration, too many nodes, no node_register in time
	CloseTooBig        = 1009 // a message over the size limit
	CloseUnanswered    = 1011 // a ping unanswered or a write failed: the socket is dead
	CloseTryAgainLater = 1013 // the node's send queue overflowed, or the coordinator cannot register it now
	// CloseReplaced: a newer connection of the same identity took over. The
	// node must not reconnect (it would fight over its identity).
	CloseReplaced       = 4000
	CloseAuthFailed     = 4001 // the key is unknown or was revoked
	CloseAccountDeleted = 4003
)

// MaxMessageBytes is the largest message the coordinator accepts from a
// node by default (--max-message-bytes); a bigger one closes the connection
// with CloseTooBig.
const MaxMessageBytes = 4 << 20

// MaxAssignBytes is the largest message the coordinator sends a node, and
// what the Go SDK reads. A task_assign holds at most 200,000 characters of
// content, 32 KiB of params and a resume_text of the result cap (1 MiB by
// default); JSON writes a character in at most 6 bytes (\u003c for '<',
// \u0001 for a control byte), so the worst of them is 7.3 MiB with its
// envelope. A resume_text past the default cap (--result-max-bytes raised)
// can make a task_assign larger: the coordinator must not send one (it does
// not resume that stream), since the node would drop the connection (1009)
// and with it every other task it holds.
const MaxAssignBytes = 8 << 20
