package tasks

import (
	"errors"
	"net/http"

	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
)

// Code is a public error code of a task that did not end with a node's
// result: the `code` of the error body and of an SSE error event.
type Code string

// The public codes. Each maps to one HTTP status in Error.Status.
const (
	CodeNoNode           Code = "no_node_available" // no node online can take the task type
	CodeBusy             Code = "nodes_busy"        // nodes can take it, but every one stayed full for the queue timeout
	CodeNodeDisconnected Code = "node_disconnected" // the node (or its instance) went away mid-task
	CodeResultTooLarge   Code = "result_too_large"  // the node's output went over the result cap
	CodeTimeout          Code = "timeout"           // no result (or, streaming, no chunk) in time
	CodeStreamOverflow   Code = "stream_overflow"   // the client read the stream too slowly: its unread chunks went over the bound
	CodeTaskFailed       Code = "task_failed"       // streaming only: the node reported a failure
	CodeRejected         Code = "task_rejected"     // the node could not read the task (status "rejected"); not held against it
	CodeCanceled         Code = "canceled"          // the client went away; nobody sees this one
	CodeUnavailable      Code = "unavailable"       // the instance cannot reach the bus or is draining
	CodeInternal         Code = "internal"          // a bug: an error that is not a task failure
)

// Status is the outcome of a task that reached its node and came back with
// a result: store.StatusCompleted or store.StatusFailed.
type Status string

// The two statuses of an Outcome, spelled as the store spells them.
const (
	StatusCompleted Status = store.StatusCompleted
	StatusFailed    Status = store.StatusFailed
)

// statusRejected is the task_result status of a node that could not read
// the assign (its params, say), as bus.Result carries it. The task fails
// with CodeRejected, and the failure is not held against the node: a
// request it cannot decode is the requester's doing (invariant 15).
const statusRejected = string(wire.StatusRejected)

// Error is a task failure with a code that maps to one HTTP status.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Status is the HTTP status of the error on /api/v1/request. The OpenAI
// routes answer CodeNoNode with 503 instead (GemmaNet does).
func (e *Error) Status() int {
	switch e.Code {
	case CodeNoNode:
		return http.StatusNotFound
	case CodeNodeDisconnected, CodeResultTooLarge, CodeTaskFailed, CodeRejected, CodeStreamOverflow:
		return http.StatusBadGateway
	case CodeTimeout:
		return http.StatusGatewayTimeout
	case CodeCanceled:
		return 499 // client closed request; logged, never sent
	case CodeUnavailable, CodeBusy:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// AsError returns err's *Error, or an internal one.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// refusalKind says why an owner did not hand a task to its node. It is an
// internal signal between requester and owner, never a public code: the
// requester retries on another node. Its values travel in a bus result's
// code field, so they are part of the envelope protocol between instances.
type refusalKind string

const (
	refusedNotHere refusalKind = "refused"    // not handed to the node; try another
	refusedFull    refusalKind = "full"       // the node had no free slot; wait and retry
	refusedGone    refusalKind = "owner_gone" // the owner instance is gone or draining
)

// refusal is an owner's refusal of an assign. It is not an *Error, so
// AsError never turns one into an answer by mistake: the dispatcher
// consumes every refusal.
type refusal struct {
	kind refusalKind
	msg  string
}

func (r *refusal) Error() string { return string(r.kind) + ": " + r.msg }

// asRefusal decodes a bus result's code: a refusal, or nil for a public code.
func asRefusal(code, msg string) *refusal {
	switch k := refusalKind(code); k {
	case refusedNotHere, refusedFull, refusedGone:
		return &refusal{kind: k, msg: msg}
	}
	return nil
}

func isRefused(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

func refusalOf(err error) refusalKind {
	var r *refusal
	if errors.As(err, &r) {
		return r.kind
	}
	return ""
}
