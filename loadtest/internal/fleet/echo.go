package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/live"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

// Echo is the sweep's workers: SDK nodes whose handler (handlers.Echo)
// returns the task's content at once.
type Echo struct {
	want       int
	registered atomic.Int64
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// StartEcho connects n echo nodes of concurrency slots each to the node
// socket at wsURL, all at once: twenty are no thundering herd. Node i
// uses keys[i mod len(keys)] and serves capability only.
func StartEcho(ctx context.Context, n, concurrency int, wsURL string, keys []string, capability string) (*Echo, error) {
	nctx, cancel := context.WithCancel(ctx)
	e := &Echo{want: n, cancel: cancel}
	prefix := "sweep-" + cluster.RandHex(3) + "-"
	for i := range n {
		node, err := sdk.NewNode(sdk.NodeConfig{
			URL: wsURL, APIKey: keys[i%len(keys)], Name: prefix + strconv.Itoa(i),
			Capabilities: []string{capability}, MaxConcurrency: concurrency, Handler: handlers.Echo(),
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnRegistered: func(string) { e.registered.Add(1) },
		})
		if err != nil {
			e.Stop()
			return nil, fmt.Errorf("echo node %d: %w", i, err)
		}
		e.wg.Go(func() { _ = node.Run(nctx) })
	}
	return e, nil
}

// AwaitRegistered waits until every node has registered.
func (e *Echo) AwaitRegistered(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for e.registered.Load() < int64(e.want) {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d echo nodes registered after %v (the instance's log may say why)", e.registered.Load(), e.want, limit)
		}
		if !live.SleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return ctx.Err()
		}
	}
	return nil
}

// Stop disconnects the nodes and waits for them.
func (e *Echo) Stop() {
	e.cancel()
	e.wg.Wait()
}
