package load

import (
	"errors"
	"fmt"
	"testing"

	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/sdk"
)

func TestClassifyAnswer(t *testing.T) {
	for _, tc := range []struct {
		name             string
		res              *sdk.TaskResult
		err              error
		aborted, expired bool
		want             ledger.Answer
	}{
		{"result", &sdk.TaskResult{Status: "completed", ProcessingTimeMs: 120, NodeID: "n"}, nil, false, false,
			ledger.Answer{Outcome: ledger.OutcomeOK, Status: 200, ProcMs: 120, NodeID: "n"}},
		{"failed task", &sdk.TaskResult{Status: "failed", Result: "boom"}, nil, false, false,
			ledger.Answer{Outcome: ledger.OutcomeFailed, Status: 200, Code: "failed", Message: "boom"}},
		{"HTTP error", nil, &sdk.APIError{Status: 502, Code: "node_disconnected", Message: "gone"}, false, false,
			ledger.Answer{Outcome: ledger.OutcomeError, Status: 502, Code: "node_disconnected", Message: "gone"}},
		{"error event in a stream", nil, fmt.Errorf("wrapped: %w", &sdk.APIError{Status: 200, Code: "timeout"}), false, false,
			ledger.Answer{Outcome: ledger.OutcomeError, Status: 200, Code: "timeout"}},
		{"deadline passed", nil, errors.New("context deadline exceeded"), false, true,
			ledger.Answer{Outcome: ledger.OutcomeLost, Message: "no outcome by the deadline plus the grace period"}},
		{"interrupted", nil, errors.New("context canceled"), true, true,
			ledger.Answer{Outcome: ledger.OutcomeAborted, Message: "context canceled"}},
		{"connection dropped", nil, errors.New("EOF"), false, false,
			ledger.Answer{Outcome: ledger.OutcomeError, Code: ledger.CodeTransport, Message: "EOF"}},
	} {
		if got := classifyAnswer(tc.res, tc.err, 0, tc.aborted, tc.expired); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
