package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/server"
)

// keys revoke and accounts delete, given the instances' Redis, publish the
// auth event that makes every running instance act at once (invariant 15).
func TestRevokeAndDeletePublish(t *testing.T) {
	ns := redistest.Namespace(t)
	ctx := testCtx(t)
	// Follow the auth events as an instance does.
	control := bus.NewRedisControl(redistest.Client(t), ns, false)
	fctx, stop := context.WithCancel(ctx)
	heard, subscribed, done := make(chan []byte, 4), make(chan struct{}, 1), make(chan error, 1)
	go func() {
		done <- control.Follow(fctx, server.TopicAuth, func(p []byte) { heard <- p }, func() {
			select {
			case subscribed <- struct{}{}:
			default:
			}
		})
	}()
	defer func() { stop(); <-done }()
	<-subscribed
	next := func() server.AuthEvent {
		t.Helper()
		select {
		case p := <-heard:
			var ev server.AuthEvent
			if err := json.Unmarshal(p, &ev); err != nil {
				t.Fatal(err)
			}
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no auth event within 5s")
		}
		return server.AuthEvent{}
	}
	flags := []string{"--data-dir", t.TempDir()}
	ev := []string{"--redis-url", redistest.URL(), "--namespace", ns}
	key := lastLine(t, mustCLI(t, append([]string{"accounts", "create", "--name", "ivo"}, flags...)...))
	acct, err := openFlags(t, flags).Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}

	out := mustCLI(t, append(append(append([]string{"keys", "revoke"}, flags...), ev...), key[:11])...)
	if !strings.Contains(out, "1 running instance(s) told at once") {
		t.Errorf("keys revoke printed %q", out)
	}
	if got := next(); got != (server.AuthEvent{Kind: server.AuthKeyRevoked, AccountID: acct.ID, KeyPrefix: key[:11]}) {
		t.Fatalf("keys revoke published %+v", got)
	}

	mustCLI(t, append(append(append([]string{"accounts", "delete"}, flags...), ev...), "ivo")...)
	if got := next(); got != (server.AuthEvent{Kind: server.AuthAccountDeleted, AccountID: acct.ID}) {
		t.Fatalf("accounts delete published %+v", got)
	}
}
