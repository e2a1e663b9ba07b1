// Package handlers holds ready-made sdk.Handlers: Echo, Sleep and Exec. They
// back the `switchyard node` worker and the load test's simulated nodes.
package handlers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// Echo returns the task's content as its result; when streaming, it also
// sends it as one chunk.
func Echo() sdk.Handler {
	return sdk.HandlerFunc(func(ctx context.Context, t *sdk.Task, emit func(string) error) (sdk.Result, error) {
		if err := emit(t.Content); err != nil {
			return sdk.Result{}, err
		}
		return sdk.Result{Text: t.Content}, nil
	})
}

// Sleep simulates work: each task sleeps a uniformly random time in
// [lo, hi] (hi below lo counts as lo). When the task streams, it sends
// chunks chunks ("chunk i/n\n") evenly spread over that time, the last at the
// end. The result is the chunks it sent followed by "slept <duration>", the
// time it actually spent. Cancelling ctx ends the sleep at once with ctx's
// error.
func Sleep(lo, hi time.Duration, chunks int) sdk.Handler {
	lo = max(lo, 0)
	hi = max(hi, lo)
	chunks = max(chunks, 0)
	return sdk.HandlerFunc(func(ctx context.Context, t *sdk.Task, emit func(string) error) (sdk.Result, error) {
		start := time.Now()
		total := lo + time.Duration(rand.Int64N(int64(hi-lo)+1))
		n := chunks
		if !t.Stream {
			n = 0
		}
		var text strings.Builder
		// Chunk i (1-based) is due at total*i/n after start, measured from
		// start rather than from the previous chunk so that sends do not add
		// up; with no chunks there is one wake-up, at total.
		for i := 1; i <= max(n, 1); i++ {
			due := total
			if n > 0 {
				due = total * time.Duration(i) / time.Duration(n)
			}
			if err := sleepUntil(ctx, start.Add(due)); err != nil {
				return sdk.Result{}, err
			}
			if n > 0 {
				chunk := fmt.Sprintf("chunk %d/%d\n", i, n)
				if err := emit(chunk); err != nil {
					return sdk.Result{}, err
				}
				text.WriteString(chunk)
			}
		}
		fmt.Fprintf(&text, "slept %s", time.Since(start).Round(time.Microsecond))
		return sdk.Result{Text: text.String()}, nil
	})
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
