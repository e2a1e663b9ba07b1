package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/sdk"
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
