package tasks

import (
	"errors"
	"net/http"
)

// Error codes of a task that did not end with a node's result. They are the
// `code` of the error body and of an SSE error event.
const (
	CodeNoNode           = "no_node_available" // no node online can take the task type
	CodeBusy             = "nodes_busy"        // nodes can take it, but every one stayed full for the queue timeout
	CodeNodeDisconnected = "node_disconnected" // the node (or its instance) went away mid-task
	CodeResultTooLarge   = "result_too_large"  // the node's output went over the result cap
	CodeTimeout          = "timeout"           // no result (or, streaming, no chunk) in time
	CodeTaskFailed       = "task_failed"       // streaming only: the node reported a failure
	CodeCanceled         = "canceled"          // the client went away; nobody sees this one
	CodeUnavailable      = "unavailable"       // the instance cannot reach the bus or is draining
	codeRefused          = "refused"           // owner side: not handed to the node; try another
	codeFull             = "full"              // owner side: not handed over, the node had no free slot; wait and retry
	codeGone             = "owner_gone"        // not handed over: the owner instance is gone or draining
)

// Error is a task failure with a code that maps to one HTTP status.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Status is the HTTP status of the error on /api/v1/request. The OpenAI
// routes answer CodeNoNode with 503 instead (GemmaNet does).
func (e *Error) Status() int {
	switch e.Code {
	case CodeNoNode:
		return http.StatusNotFound
	case CodeNodeDisconnected, CodeResultTooLarge, CodeTaskFailed:
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
	return &Error{Code: "internal", Message: err.Error()}
}

func refused(msg string) *Error { return &Error{Code: codeRefused, Message: msg} }

func isRefused(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Code == codeRefused || e.Code == codeFull || e.Code == codeGone)
}

func isGone(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == codeGone
}

func isFull(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == codeFull
}
