// Package handlers holds ready-made sdk.Handlers: Echo, Sleep and Exec. They
// back the `switchyard node` worker and the load test's simulated nodes.
// Each can continue a resumed stream (sdk.Task.Resume), so a node serving
// them may set sdk.NodeConfig.Resume: Echo and Sleep produce the same text
// every time and continue their own, and Exec hands the text to its
// command.
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
// sends it as one chunk. Resumed, it sends and returns only the part of
// the content that follows the text the client has (an error if that text
// does not begin the content).
func Echo() sdk.Handler {
	return sdk.HandlerFunc(func(ctx context.Context, t *sdk.Task, emit func(string) error) (sdk.Result, error) {
		rest, err := after(t.Content, t.Resume)
		if err != nil {
			return sdk.Result{}, err
		}
		if err := emit(rest); err != nil {
			return sdk.Result{}, err
		}
		return sdk.Result{Text: rest}, nil
	})
}

// after is what follows resume in full, the output a handler produces
// every time: what a resumed handler still has to send. A resume that
// does not begin full came from another handler, and continuing after it
// would give the client a text neither would have written.
func after(full, resume string) (string, error) {
	rest, ok := strings.CutPrefix(full, resume)
	if !ok {
		return "", fmt.Errorf("cannot resume: the %d bytes the client has are not the start of this handler's output", len(resume))
	}
	return rest, nil
}

// Sleep simulates work: each task sleeps a uniformly random time in
// [lo, hi] (hi below lo counts as lo). When the task streams, it sends
// chunks chunks ("chunk i/n\n") evenly spread over that time, the last at the
// end. The result is the chunks it sent followed by "slept <duration>", the
// time it actually spent. Cancelling ctx ends the sleep at once with ctx's
// error.
//
// Resumed, it sends only what follows the text the client has (from the
// middle of a chunk if that text ends there), spread over the share of the
// time those chunks would have taken, and its result is what it sent
// followed by "slept <duration>".
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
		all := make([]string, n)
		for i := range all {
			all[i] = fmt.Sprintf("chunk %d/%d\n", i+1, n)
		}
		if _, err := after(strings.Join(all, ""), t.Resume); err != nil {
			return sdk.Result{}, err
		}
		todo := all
		for skip := len(t.Resume); skip > 0; todo = todo[1:] {
			if skip < len(todo[0]) {
				todo[0] = todo[0][skip:]
				break
			}
			skip -= len(todo[0])
		}
		var text strings.Builder
		// The j-th chunk still to send (1-based) is due at total*j/n after
		// start, measured from start rather than from the previous chunk
		// so that sends do not add up; with no chunks at all there is one
		// wake-up, at total.
		if n == 0 {
			if err := sleepUntil(ctx, start.Add(total)); err != nil {
				return sdk.Result{}, err
			}
		}
		for j, chunk := range todo {
			if err := sleepUntil(ctx, start.Add(total*time.Duration(j+1)/time.Duration(n))); err != nil {
				return sdk.Result{}, err
			}
			if err := emit(chunk); err != nil {
				return sdk.Result{}, err
			}
			text.WriteString(chunk)
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
