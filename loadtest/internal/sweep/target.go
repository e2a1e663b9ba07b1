package sweep

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/sdk"
)

// target is what a sweep step sends its requests to: the embedded
// NATS baseline or a switchyard instance.
type target interface {
	// do sends one request whose content is body and returns what came
	// back (an echo, for the step to compare with body), or why nothing
	// did: a *answerError or an *sdk.APIError for an explicit answer that
	// is not an echo, else a transport error or ctx's.
	do(ctx context.Context, body string) (string, error)
}

// answerError is an explicit answer that is not an echo: a failed task, no
// responders, an echo of something else.
type answerError struct {
	Status  int // HTTP status, 0 when there is none
	Code    string
	Message string
}

func (e *answerError) Error() string { return e.Code + ": " + e.Message }

// classify turns what do returned into an outcome and, for a non-ok
// one, the key it is counted under ("503 nodes_busy", "timeout"…).
// aborted: the load test was interrupted; expired: the request's own
// deadline (the task timeout plus the grace period) passed.
func classify(err error, aborted, expired bool) (outcome, key string) {
	var api *sdk.APIError
	var se *answerError
	switch {
	case err == nil:
		return ledger.OutcomeOK, ""
	case errors.As(err, &api):
		return ledger.OutcomeError, fmt.Sprintf("%d %s", api.Status, api.Code)
	case errors.As(err, &se) && se.Status != 0:
		return ledger.OutcomeError, fmt.Sprintf("%d %s", se.Status, se.Code)
	case errors.As(err, &se):
		return ledger.OutcomeError, se.Code
	case aborted:
		return ledger.OutcomeAborted, ledger.OutcomeAborted
	case expired:
		return ledger.OutcomeLost, "timeout"
	default:
		return ledger.OutcomeError, ledger.CodeTransport
	}
}

// sweepHTTPClient is the switchyard modes' client: keep-alive with room
// for every connection a step may open to stay idle for the next request,
// so that the client never dials on the hot path once warm, and a count
// of the connections it dialled, for the report to show that.
func sweepHTTPClient() (*http.Client, *atomic.Int64) {
	dials := new(atomic.Int64)
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns: 0, MaxIdleConnsPerHost: 16384, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true,
	}}, dials
}

// switchyardTarget sends the sweep's requests to one instance, as plain
// requests (POST /api/v1/request, the sdk client's), round robin over the
// client accounts.
type switchyardTarget struct {
	clients  []*sdk.Client
	taskType string
	rr       atomic.Uint64
}

var _ target = (*switchyardTarget)(nil)

func (t *switchyardTarget) do(ctx context.Context, body string) (string, error) {
	cl := t.clients[t.rr.Add(1)%uint64(len(t.clients))]
	res, err := cl.Request(ctx, sdk.Request{TaskType: t.taskType, Content: body})
	if err != nil {
		return "", err
	}
	if res.Status != "completed" {
		return "", &answerError{Code: "task " + res.Status, Message: res.Result}
	}
	return res.Result, nil
}
