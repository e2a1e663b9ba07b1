package clustertest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
)

// A key revoked by `switchyard keys revoke` given only --database-url (no
// --redis-url, so no auth event is published) stops working on every
// instance within a second: its nodes on both instances are closed with
// 4001 and both answer its HTTP calls with 401, while a node of the
// account's other key stays. The instances learn of it from the database
// (invariant 15 in docs/INVARIANTS.md).
func TestRevokeWithTheDatabaseAlone(t *testing.T) {
	c := New(t, Config{})
	a, b := c.Start("A"), c.Start("B")
	key := c.Account("ivy")
	stdout, stderr, err := c.Run(30*time.Second, "keys", "create", "--account", "ivy", "--database-url", c.DatabaseURL)
	if err != nil {
		t.Fatalf("keys create: %v\n%s%s", err, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	other := strings.TrimSpace(lines[len(lines)-1])

	na := nodetest.Connect(t, a.WS(), nodetest.Reg(key, "na", "echo"))
	nb := nodetest.Connect(t, b.WS(), nodetest.Reg(key, "nb", "echo"))
	kept := nodetest.Connect(t, b.WS(), nodetest.Reg(other, "kept", "echo"))
	account := func(i *Instance, k string) int {
		t.Helper()
		r, err := i.Do(context.Background(), http.MethodGet, "/api/v1/account", k, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r.Code
	}
	for _, i := range []*Instance{a, b} { // each has the key in its cache
		if code := account(i, key); code != http.StatusOK {
			t.Fatalf("before the revoke, %s answered the key with %d", i.Name, code)
		}
	}

	stdout, stderr, err = c.Run(30*time.Second, "keys", "revoke", "--database-url", c.DatabaseURL, key[:11])
	revoked := time.Now() // the revocation was committed before the command exited
	if err != nil {
		t.Fatalf("keys revoke: %v\n%s%s", err, stdout, stderr)
	}
	deadline := revoked.Add(time.Second)
	for _, n := range []*nodetest.Node{na, nb} {
		if code := n.WaitClosed(time.Until(deadline)); code != websocket.StatusCode(4001) {
			t.Fatalf("a node of the revoked key closed with %d, want 4001", code)
		}
	}
	t.Logf("both nodes of the revoked key closed %s after the command exited", time.Since(revoked).Round(time.Millisecond))
	for _, i := range []*Instance{a, b} {
		if code := account(i, key); code != http.StatusUnauthorized {
			t.Errorf("after the revoke, %s answered the key with %d, want 401", i.Name, code)
		}
		if code := account(i, other); code != http.StatusOK {
			t.Errorf("after the revoke, %s answered the account's other key with %d, want 200", i.Name, code)
		}
	}
	select {
	case <-kept.Closed:
		t.Fatal("the node of the account's other key was closed too")
	default:
	}
}
