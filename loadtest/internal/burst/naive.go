package burst

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/loadtest/internal/live"
	"github.com/switchyard-dev/switchyard/loadtest/internal/report"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// handshakeTimeout bounds a naive client's dial and node_register round
// trip, as the SDK's does.
const handshakeTimeout = 15 * time.Second

// runNaive lets cfg.Nodes naive clients go at once for cfg.Duration (or
// until every one has registered) and counts how many registered.
func runNaive(ctx context.Context, t *target, p *report.BurstPhase) error {
	window := t.cfg.Duration
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var attempts, dialErrors atomic.Int64
	t.tally.start()
	end := time.Now().Add(window)
	for i := range t.cfg.Nodes {
		wg.Go(func() {
			naive(wctx, t, i, &attempts, &dialErrors)
		})
	}
	for t.tally.count() < t.cfg.Nodes && time.Now().Before(end) {
		next := time.Now().Add(time.Second)
		if next.After(end) {
			next = end
		}
		if !live.SleepUntil(ctx, next) {
			return ctx.Err()
		}
		t.progress(t.tally.count())
	}
	p.WindowS = stats.Round3(t.tally.since().Seconds())
	p.Attempts, p.DialErrors = attempts.Load(), dialErrors.Load()
	// Listed while the clients still hold their sockets.
	if t.tally.count() == t.cfg.Nodes {
		return t.awaitListed(ctx, p)
	}
	p.Listed = t.listed(ctx)
	return nil
}

// naive is one naive client: it connects, sends node_register and, if it
// is refused or dropped, connects again at once; once registered it
// reads (answering pings) until the connection ends or ctx does.
func naive(ctx context.Context, t *target, i int, attempts, dialErrors *atomic.Int64) {
	reg := wire.MustEncode(wire.MsgNodeRegister, wire.RegisterPayload{
		APIKey: t.keys[i%len(t.keys)], Name: t.prefix + strconv.Itoa(i), Capabilities: []string{t.capability},
	})
	for ctx.Err() == nil {
		attempts.Add(1)
		if err := naiveOnce(ctx, t, i, reg); errors.Is(err, errDial) {
			dialErrors.Add(1)
		}
	}
}

var errDial = errors.New("dial failed")

// naiveOnce is one connection of a naive client.
func naiveOnce(ctx context.Context, t *target, i int, reg []byte) error {
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	c, _, err := websocket.Dial(hctx, t.in.WSURL(), nil)
	if err != nil {
		return fmt.Errorf("%w: %v", errDial, err)
	}
	defer c.CloseNow()
	if err := c.Write(hctx, websocket.MessageText, reg); err != nil {
		return err
	}
	_, data, err := c.Read(hctx)
	if err != nil {
		return err // a shed: close 1013 (the hint in its reason is not read)
	}
	env, err := wire.ParseEnvelope(data)
	if err != nil || env.MsgType != wire.MsgNodeRegistered {
		return fmt.Errorf("first message %q", data)
	}
	t.tally.mark(i)
	cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return err
		}
	}
}
