package sdk

import "github.com/switchyard-dev/switchyard/sdk/wire"

// The node protocol (docs/PROTOCOL.md) is package sdk/wire, shared with the
// coordinator. These are the names of it that the SDK's own API shows.

// Usage is the token count a handler may report (Result.Usage) and a
// finished task carries (TaskResult.Usage); it reaches the API client
// unchanged. It is the protocol's wire.Usage.
type Usage = wire.Usage

// ErrorPayload is the {code, message} error object of the HTTP API's error
// bodies and stream events, and of the node protocol's `error` message: it
// is wire.ErrorPayload.
type ErrorPayload = wire.ErrorPayload

// MaxMessageBytes is the largest message the server accepts from a node by
// default: a handler's result must fit in it with its envelope, or the task
// fails. It is wire.MaxMessageBytes.
const MaxMessageBytes = wire.MaxMessageBytes
