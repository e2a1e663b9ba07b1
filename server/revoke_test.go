package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Invariant 15: revoking a key acts on every instance within a second. Two
// instances on one Redis; a node of the key is on B, and B has the key in
// its cache. The key is revoked the way the CLI does it (in the store,
// then an auth event on Redis): B closes the node with 4001 within 1 s and
// answers 401 to the key at once; a node of the account's other key stays.
// Then the account is deleted over HTTP on A: its node on B is closed
// with 4003 within 1 s.
func TestRevocationReachesEveryInstance(t *testing.T) {
	rdb := redistest.Client(t)
	ns, db := redistest.Namespace(t), pgtest.SchemaURL(t, "revoke")
	multi := func(c *Config) {
		c.RedisURL, c.Namespace, c.DatabaseURL, c.MaxNodesPerAccount = redistest.URL(), ns, db, 100
	}
	a := startApp(t, multi)
	b := startApp(t, multi)
	ctx := context.Background()
	key := a.account(t, "alice", "")
	acct, err := a.store.Authenticate(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := a.store.CreateKey(ctx, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	revoked := connectNode(t, b.wsURL, reg(key, "n1", "echo"))
	kept := connectNode(t, b.wsURL, reg(other, "n2", "echo"))
	if code, body, _, err := b.do(http.MethodGet, "/api/v1/account", key, nil); err != nil || code != 200 {
		t.Fatalf("before: %d %s %v", code, body, err)
	}

	if err := a.store.RevokeKey(ctx, keyPrefix(key)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := PublishAuthEvent(ctx, bus.NewRedisControl(rdb, ns, false), AuthEvent{Kind: AuthKeyRevoked, AccountID: acct.ID, KeyPrefix: keyPrefix(key)}); err != nil {
		t.Fatal(err)
	}
	if code := revoked.WaitClosed(time.Second); code != wire.CloseAuthFailed {
		t.Fatalf("the revoked key's node closed with %d, want 4001", code)
	}
	t.Logf("the node on the other instance was closed %s after the event", time.Since(start))
	if code, body, _, err := b.do(http.MethodGet, "/api/v1/account", key, nil); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("the revoked key on B right after the event: %d %s %v, want 401", code, body, err)
	}
	select {
	case <-kept.Closed:
		t.Fatal("a node of the account's other key was closed too")
	default:
	}

	if code, body, _, err := a.do(http.MethodDelete, "/api/v1/account", other, nil); err != nil || code != 200 {
		t.Fatalf("delete on A: %d %s %v", code, body, err)
	}
	start = time.Now()
	if code := kept.WaitClosed(time.Second); code != wire.CloseAccountDeleted {
		t.Fatalf("the deleted account's node on B closed with %d, want 4003", code)
	}
	t.Logf("the deleted account's node on the other instance was closed %s after the delete", time.Since(start))
	if code, _, _, _ := b.do(http.MethodGet, "/api/v1/account", other, nil); code != http.StatusUnauthorized {
		t.Fatalf("the deleted account's key on B: %d, want 401", code)
	}
}

// Without Redis (one instance, the store alone), a key revoked by the CLI
// in the store is noticed when the store's AuthSeq moves: its node is
// closed with 4001 within a second, and the cache forgets the key.
func TestRevocationWithoutRedis(t *testing.T) {
	a := startApp(t, nil)
	ctx := context.Background()
	key := a.account(t, "bob", "")
	n := connectNode(t, a.wsURL, reg(key, "n", "echo"))
	if code, _, _, _ := a.do(http.MethodGet, "/api/v1/account", key, nil); code != 200 {
		t.Fatalf("before: %d", code)
	}
	if err := a.store.RevokeKey(ctx, keyPrefix(key)); err != nil {
		t.Fatal(err)
	}
	if code := n.WaitClosed(time.Second); code != wire.CloseAuthFailed {
		t.Fatalf("closed with %d, want 4001", code)
	}
	if code, _, _, _ := a.do(http.MethodGet, "/api/v1/account", key, nil); code != http.StatusUnauthorized {
		t.Fatalf("the revoked key after the check: %d, want 401", code)
	}
}
