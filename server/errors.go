package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/tasks"
)

// Code is the machine-readable code of an error answer ("error.code");
// docs/PROTOCOL.md lists them all, and TestErrorCodesDocumented holds it to
// this list. A task's failure carries its tasks.Code instead (taskError).
type Code string

// The codes of the API's own errors.
const (
	CodeAlreadyRated             Code = "already_rated"               // 409: the task was rated by this account
	CodeBadRequest               Code = "bad_request"                 // 400: a body that is not what the route reads
	CodeBudgetExhausted          Code = "budget_exhausted"            // 402: the key's spend budget of the day or month is spent (X-Quota-*)
	CodeConflict                 Code = "conflict"                    // 409, raised without a code of its own
	CodeContextLengthExceeded    Code = "context_length_exceeded"     // 400 on /v1/: the prompt is over the model's limit
	CodeError                    Code = "error"                       // a status with no code of its own (never expected)
	CodeForbidden                Code = "forbidden"                   // 403, raised without a code of its own
	CodeIdempotencyKeyReleased   Code = "idempotency_key_released"    // 503: the request first sent with this Idempotency-Key ended without an answer; send again
	CodeIdempotencyKeyReused     Code = "idempotency_key_reused"      // 422: the Idempotency-Key was used with another request
	CodeIdempotencyKeysExhausted Code = "idempotency_keys_exhausted"  // 429: the account holds --idempotency-max-keys keys
	CodeIdempotentAnswerTooLarge Code = "idempotent_answer_too_large" // 502: a replay of an answer too large to keep
	CodeInternal                 Code = "internal"                    // 500: a failure the code did not foresee (logged)
	CodeInvalidAPIKey            Code = "invalid_api_key"             // 401: no key, an unknown key, or a revoked one
	CodeInvalidIdempotencyKey    Code = "invalid_idempotency_key"     // 400: an Idempotency-Key that is not 1-255 printable ASCII characters, or given twice
	CodeInvalidLastEventID       Code = "invalid_last_event_id"       // 422: a task stream's Last-Event-ID does not parse
	CodeInvalidRating            Code = "invalid_rating"              // 400: a rating that is not 1-5
	CodeInvalidRequest           Code = "invalid_request"             // 422 (or 400): a field out of its bounds
	CodeInvalidWebhookURL        Code = "invalid_webhook_url"         // 422: webhook_url refused (too long, not http(s), private)
	CodeKeyScope                 Code = "key_scope"                   // 403: the key may not do this (node-only, or not this task type)
	CodeMethodNotAllowed         Code = "method_not_allowed"          // 405
	CodeNodeError                Code = "node_error"                  // 502 on /v1/: the node's handler failed
	CodeNodeNotFound             Code = "node_not_found"              // 404: no node with this id for this account
	CodeNotFound                 Code = "not_found"                   // 404, raised without a code of its own
	CodeNotReady                 Code = "not_ready"                   // 503: the instance is draining or not ready
	CodeNotTaskOwner             Code = "not_task_owner"              // 403: only the account that asked may rate
	CodePayloadTooLarge          Code = "payload_too_large"           // 413: the body is over its limit
	CodeQuotaExceeded            Code = "quota_exceeded"              // 429: the key's tokens of the day or month are spent (X-Quota-*)
	CodeRateLimited              Code = "rate_limited"                // 429 (403 for node handshakes): over a rate limit
	CodeRegistrationClosed       Code = "registration_closed"         // 403: self-service accounts are off
	CodeStoreUnavailable         Code = "store_unavailable"           // 503: the database cannot answer now
	CodeStreamNotFound           Code = "stream_not_found"            // 404: the task kept no stream
	CodeStreamUnavailable        Code = "stream_unavailable"          // a task stream's error event: its log cannot be read now
	CodeTaskNotFound             Code = "task_not_found"              // 404: no task with this id for this account
	CodeTooManyInFlight          Code = "too_many_in_flight"          // 429: the key's concurrent-request limit
	CodeUnauthorized             Code = "unauthorized"                // 401: an admin route without the admin token
	CodeUnavailable              Code = "unavailable"                 // 503: a dependency cannot answer now; retry
)

// apiError is an error answer. Its body serves both of GemmaNet's readers:
// {"error":{"code","message"},"detail":"<message>"}.
type apiError struct {
	Status     int
	Code       Code
	Message    string
	RetryAfter string // seconds, for 429 and 503
}

func (e *apiError) Error() string { return string(e.Code) + ": " + e.Message }

func newError(status int, code Code, message string) *apiError {
	return &apiError{Status: status, Code: code, Message: message}
}

type errorBody struct {
	Error  errorDetail `json:"error"`
	Detail string      `json:"detail"`
}

type errorDetail struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// taskError turns a task failure into its answer; a task refused before
// it ran (its key's limits: runAdmitted) keeps its own.
func taskError(err error) *apiError {
	if ae, ok := errors.AsType[*apiError](err); ok {
		return ae
	}
	e := tasks.AsError(err)
	ae := newError(e.Status(), Code(e.Code), e.Message)
	if ae.Status == http.StatusServiceUnavailable {
		ae.RetryAfter = "1"
	}
	return ae
}

// defaultCodes names the error code of statuses raised without one.
var defaultCodes = map[int]Code{
	http.StatusBadRequest:            CodeBadRequest,
	http.StatusUnauthorized:          CodeInvalidAPIKey,
	http.StatusForbidden:             CodeForbidden,
	http.StatusNotFound:              CodeNotFound,
	http.StatusMethodNotAllowed:      CodeMethodNotAllowed,
	http.StatusConflict:              CodeConflict,
	http.StatusRequestEntityTooLarge: CodePayloadTooLarge,
	http.StatusUnprocessableEntity:   CodeInvalidRequest,
	http.StatusTooManyRequests:       CodeRateLimited,
	http.StatusServiceUnavailable:    CodeNotReady,
}

// handleError is echo's HTTPErrorHandler: every error leaves in one shape,
// OpenAI's on the /v1/ routes, ours (both GemmaNet readers) elsewhere.
func (a *App) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	ae := a.asAPIError(err, c)
	h := c.Response().Header()
	if ae.RetryAfter != "" {
		h.Set("Retry-After", ae.RetryAfter)
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(ae.Status)
		return
	}
	if strings.HasPrefix(c.Request().URL.Path, "/v1/") {
		if ae.Code == CodeNodeError {
			// OpenAI's libraries retry a 502 unless told not to; a handler
			// that failed would only fail again, and count against its node.
			h.Set("X-Should-Retry", "false")
		}
		_ = c.JSON(ae.Status, openAIErrorBody{Error: toOpenAIError(ae)})
		return
	}
	_ = c.JSON(ae.Status, errorBody{Error: errorDetail{Code: ae.Code, Message: ae.Message}, Detail: ae.Message})
}

// asAPIError turns any error into the answer it gets, with a code.
func (a *App) asAPIError(err error, c echo.Context) *apiError {
	var ae *apiError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &he):
		msg := http.StatusText(he.Code)
		if s, ok := he.Message.(string); ok {
			msg = s
		}
		if he.Code == http.StatusRequestEntityTooLarge {
			msg = "the request body is too large"
		}
		ae = newError(he.Code, "", msg)
	default:
		a.log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
		ae = newError(http.StatusInternalServerError, CodeInternal, "an unexpected error occurred")
	}
	if ae.Code == "" {
		ae.Code = defaultCodes[ae.Status]
		if ae.Code == "" {
			ae.Code = CodeError
		}
	}
	return ae
}
