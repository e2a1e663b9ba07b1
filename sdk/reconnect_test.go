package sdk_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
	"github.com/switchyard-dev/switchyard/sdk/internal/fakeserver"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Connection lifecycle: drops, backoff, permanent stops, draining, pings.

func TestDisconnectCancelsHandlersAndReconnects(t *testing.T) {
	ctx := waitCtx(t)
	started, cancelled := make(chan string, 1), make(chan string, 1)
	h := start(t, func(c *sdk.NodeConfig) { c.Handler = blocking(started, cancelled) })
	c1 := h.registered(ctx, "n1")
	assign(t, ctx, c1, wire.TaskAssignPayload{TaskID: "t1", TaskType: "echo"})
	<-started
	c1.Drop()
	select {
	case <-cancelled:
	case <-ctx.Done():
		t.Fatal("dropping the connection did not cancel the handler")
	}
	c2 := h.registered(ctx, "n1")
	assign(t, ctx, c2, wire.TaskAssignPayload{TaskID: "t2", TaskType: "echo", Content: "quick"})
	var res wire.TaskResultPayload
	if _, err := c2.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
		t.Fatal(err)
	}
	if res.TaskID != "t2" || res.Result != "quick" {
		t.Errorf("task_result on the new connection = %+v", res)
	}
}

func TestReconnectBacksOff(t *testing.T) {
	ctx := waitCtx(t)
	const minBackoff = 20 * time.Millisecond
	srv := fakeserver.New()
	srv.RefuseNext(3)
	h := startOn(t, srv, func(c *sdk.NodeConfig) {
		c.MinBackoff = minBackoff
		c.MaxBackoff = time.Second
	})
	h.registered(ctx, "n1")
	at := h.srv.Attempts()
	if len(at) != 4 {
		t.Fatalf("%d handshake attempts, want 4 (3 refused)", len(at))
	}
	// Delays are jittered into [d/2, d] with d doubling from minBackoff.
	for i, d := range []time.Duration{minBackoff, 2 * minBackoff, 4 * minBackoff} {
		if gap := at[i+1].Sub(at[i]); gap < d/2 {
			t.Errorf("retry %d came %v after the previous attempt, want at least %v", i+1, gap, d/2)
		}
	}
}

func TestBackoffResetsAfterRegistration(t *testing.T) {
	ctx := waitCtx(t)
	const minBackoff = 10 * time.Millisecond
	srv := fakeserver.New()
	srv.RefuseNext(6) // the next delay would be at least 320 ms without a reset
	h := startOn(t, srv, func(c *sdk.NodeConfig) {
		c.MinBackoff = minBackoff
		c.MaxBackoff = 10 * time.Second
	})
	c := h.registered(ctx, "n1")
	dropped := time.Now()
	c.Drop()
	h.registered(ctx, "n1")
	at := h.srv.Attempts()
	if gap := at[len(at)-1].Sub(dropped); gap > 300*time.Millisecond {
		t.Errorf("reconnected %v after a drop; the backoff was not reset by the registration", gap)
	}
}

func TestStopsForGood(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close websocket.StatusCode
		want  error
	}{
		{"replaced", wire.CloseReplaced, sdk.ErrReplaced},
		{"account deleted", wire.CloseAccountDeleted, sdk.ErrAccountDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := waitCtx(t)
			h := start(t, nil)
			c := h.registered(ctx, "n1")
			_ = c.Close(tc.close, "bye")
			if err := h.result(); !errors.Is(err, tc.want) {
				t.Errorf("Run = %v, want %v", err, tc.want)
			}
			if n := len(h.srv.Attempts()); n != 1 {
				t.Errorf("%d connection attempts, want 1 (no reconnect)", n)
			}
		})
	}
}

func TestRegistrationRefused(t *testing.T) {
	for _, tc := range []struct {
		code      wire.ErrorCode
		close     websocket.StatusCode
		permanent bool
	}{
		{wire.CodeAuthFailed, wire.CloseAuthFailed, true},
		{wire.CodeInvalidRegistration, wire.ClosePolicy, true},
		{wire.CodeTooManyNodes, wire.ClosePolicy, false},
	} {
		t.Run(string(tc.code), func(t *testing.T) {
			ctx := waitCtx(t)
			h := start(t, nil)
			c, err := h.srv.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Reject(ctx, tc.code, "no", tc.close); err != nil {
				t.Fatal(err)
			}
			if !tc.permanent {
				h.registered(ctx, "n1") // it retries, and this time it is let in
				return
			}
			var re *sdk.RegistrationError
			if err := h.result(); !errors.As(err, &re) || re.Code != string(tc.code) || re.Message != "no" {
				t.Errorf("Run = %v, want a RegistrationError %s", err, tc.code)
			}
		})
	}
}

func TestDrainingServerReconnectsAtOnce(t *testing.T) {
	ctx := waitCtx(t)
	h := start(t, func(c *sdk.NodeConfig) {
		// Any backoff would outlast the wait below.
		c.MinBackoff = time.Minute
		c.MaxBackoff = time.Minute
	})
	c := h.registered(ctx, "n1")
	_ = c.Close(websocket.StatusGoingAway, "draining")
	h.registered(ctx, "n1")
}

func TestPings(t *testing.T) {
	ctx := waitCtx(t)
	h := start(t, func(c *sdk.NodeConfig) { c.PingInterval = 20 * time.Millisecond })
	c := h.registered(ctx, "n1")
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("the node did not answer a ping: %v", err)
	}
	c.IgnorePings()
	h.registered(ctx, "n1") // it gave up on the silent server and came back
}

func TestRunTwiceAtOnce(t *testing.T) {
	ctx := waitCtx(t)
	h := start(t, nil)
	h.registered(ctx, "n1")
	if err := h.node.Run(ctx); err == nil {
		t.Error("a second concurrent Run returned nil, want an error")
	}
}

// A coordinator that sheds a registration with a close 1013 says in its
// reason when to come back (retry_after_ms=N): the node waits that long,
// jittered up to 20 % longer, instead of its backoff, and never longer
// than MaxBackoff. A 1013 without the hint, or the hint on another close
// code, is backed off as usual. The waits are recorded, not taken.
func TestRetryAfterHintIsHonoured(t *testing.T) {
	ctx := waitCtx(t)
	srv := fakeserver.New()
	t.Cleanup(srv.Close)
	const minBackoff, maxBackoff = 10 * time.Millisecond, time.Minute
	n, err := sdk.NewNode(sdk.NodeConfig{
		URL: srv.URL, APIKey: "gn_0123456789abcdef0123456789abcdef", Name: "worker-1",
		Capabilities: []string{"echo"}, Handler: handlers.Echo(),
		HeartbeatInterval: time.Hour, PingInterval: time.Hour,
		MinBackoff: minBackoff, MaxBackoff: maxBackoff,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	slept := make(chan time.Duration, 16)
	sdk.SetSleep(n, func(ctx context.Context, d time.Duration) bool {
		slept <- d
		return ctx.Err() == nil
	})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	for _, tc := range []struct {
		name     string
		close    websocket.StatusCode
		reason   string
		min, max time.Duration
	}{
		{"hinted 1013", wire.CloseTryAgainLater, "retry_after_ms=5000; the coordinator is registering many nodes", 5 * time.Second, 6 * time.Second},
		// The hinted wait did not move the backoff: its first step still.
		{"1013 without a hint", wire.CloseTryAgainLater, "the coordinator is registering many nodes", minBackoff / 2, minBackoff},
		{"a hint longer than MaxBackoff", wire.CloseTryAgainLater, "retry_after_ms=600000", maxBackoff, maxBackoff},
		{"a hint on another code", wire.ClosePolicy, "retry_after_ms=5000", minBackoff, 2 * minBackoff},
		{"an unreadable hint", wire.CloseTryAgainLater, "retry_after_ms=soon", 2 * minBackoff, 4 * minBackoff},
	} {
		c, err := srv.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.NextOf(ctx, wire.MsgNodeRegister, nil); err != nil {
			t.Fatal(err)
		}
		_ = c.Close(tc.close, tc.reason)
		select {
		case d := <-slept:
			if d < tc.min || d > tc.max {
				t.Errorf("%s (%d %q): the node waited %v, want %v–%v", tc.name, tc.close, tc.reason, d, tc.min, tc.max)
			}
		case <-ctx.Done():
			t.Fatalf("%s: the node did not come back", tc.name)
		}
	}
	c, err := srv.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Accept(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
}
