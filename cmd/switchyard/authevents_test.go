package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/server"
)

// keys revoke and accounts delete, given the instances' Redis, publish the
// auth event that makes every running instance act at once (invariant 15).
func TestRevokeAndDeletePublish(t *testing.T) {
	rdb := redistest.Client(t)
	ns := redistest.Namespace(t)
	ctx := testCtx(t)
	ps := rdb.Subscribe(ctx, server.AuthEventsChannel(ns))
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	next := func() server.AuthEvent {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		m, err := ps.ReceiveMessage(rctx)
		if err != nil {
			t.Fatal(err)
		}
		var ev server.AuthEvent
		if err := json.Unmarshal([]byte(m.Payload), &ev); err != nil {
			t.Fatal(err)
		}
		return ev
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
