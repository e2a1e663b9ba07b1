package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/tasks"
)

// apiError is an error answer. Its body serves both of GemmaNet's readers:
// {"error":{"code","message"},"detail":"<message>"}.
type apiError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter string // seconds, for 429 and 503
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, message string) *apiError {
	return &apiError{Status: status, Code: code, Message: message}
}

type errorBody struct {
	Error  errorDetail `json:"error"`
	Detail string      `json:"detail"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// taskError turns a task failure into its answer.
func taskError(err error) *apiError {
	e := tasks.AsError(err)
	ae := newError(e.Status(), string(e.Code), e.Message)
	if ae.Status == http.StatusServiceUnavailable {
		ae.RetryAfter = "1"
	}
	return ae
}

// defaultCodes names the error code of statuses raised without one.
var defaultCodes = map[int]string{
	http.StatusBadRequest:            "bad_request",
	http.StatusUnauthorized:          "invalid_api_key",
	http.StatusForbidden:             "forbidden",
	http.StatusNotFound:              "not_found",
	http.StatusMethodNotAllowed:      "method_not_allowed",
	http.StatusConflict:              "conflict",
	http.StatusRequestEntityTooLarge: "payload_too_large",
	http.StatusUnprocessableEntity:   "invalid_request",
	http.StatusTooManyRequests:       "rate_limited",
	http.StatusServiceUnavailable:    "not_ready",
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
		if ae.Code == codeNodeError {
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
		ae = newError(http.StatusInternalServerError, "internal", "an unexpected error occurred")
	}
	if ae.Code == "" {
		ae.Code = defaultCodes[ae.Status]
		if ae.Code == "" {
			ae.Code = "error"
		}
	}
	return ae
}
