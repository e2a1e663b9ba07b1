package clustertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// Every test here runs instances as separate processes of the switchyard
// binary, which Main builds once.
func TestMain(m *testing.M) { Main(m) }

// async runs f on a goroutine and returns its answer on a channel. f gets
// the test's context, cancelled when the test ends; the test then waits
// for f to return, so no goroutine outlives it.
func async[T any](t *testing.T, f func(ctx context.Context) T) <-chan T {
	ch := make(chan T, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ch <- f(t.Context())
	}()
	t.Cleanup(func() { <-done })
	return ch
}

// waitFor returns the next value from ch, failing the test after d.
func waitFor[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %s", what, d)
	}
	var zero T
	return zero
}

// reply is an HTTP answer from a goroutine, with when it came.
type reply struct {
	*Response
	err error
	at  time.Time
}

func (r reply) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("HTTP %d %s", r.Code, r.Body)
}

// requestAsync sends POST /api/v1/request from a goroutine.
func requestAsync(t *testing.T, i *Instance, key, taskType, content string) <-chan reply {
	return async(t, func(ctx context.Context) reply {
		r, err := i.Request(ctx, key, taskType, content)
		return reply{r, err, time.Now()}
	})
}

// testCtx bounds a test's calls, so that a hang fails instead of blocking.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// probe answers the benchmark the server asks of every new node (the SDK
// runs the handler on each prompt, as task "benchmark-N"), so that handlers
// that block, or count the tasks they start, see only the test's tasks.
func probe(task *sdk.Task) (sdk.Result, bool) {
	if strings.HasPrefix(task.ID, "benchmark-") {
		return sdk.Result{Text: task.Content}, true
	}
	return sdk.Result{}, false
}

// signal sends v on ch without blocking (ch has room for what the test expects).
func signal[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}
