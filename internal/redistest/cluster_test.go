package redistest_test

import (
	"context"
	"fmt"
	"testing"

	"switchyard/internal/redistest"
)

// The cluster serves every slot from the master StartCluster gave it, its
// URL works with a cluster client, and Slot agrees with the servers.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	ctx := context.Background()
	rdb := c.Client(t)
	seen := map[*redistest.Server]bool{}
	for i := range 30 {
		key := fmt.Sprintf("k%d", i)
		want, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redistest.Slot(key); int64(got) != want {
			t.Fatalf("Slot(%q) = %d, the server says %d", key, got, want)
		}
		if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		m := c.MasterFor(t, key)
		seen[m] = true
		// The key lives on the master MasterFor names, and on no other.
		if n, err := m.Client().Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("%s on %s: exists %d, %v", key, m, n, err)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("30 keys landed on %d masters, want 3", len(seen))
	}
	if got := redistest.Slot("a{tag}b"); got != redistest.Slot("tag") {
		t.Fatalf("hash tag ignored: %d vs %d", got, redistest.Slot("tag"))
	}
}

// A replica taken over by CLUSTER FAILOVER serves its master's slots; a
// killed master's replica takes over by itself, and the killed one rejoins
// as a replica when restarted.
func TestClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: true})
	ctx := context.Background()
	key := "failover-key"
	m := c.MasterFor(t, key)
	var replica *redistest.Server
	for i, n := range c.Nodes[:3] {
		if n == m {
			replica = c.Nodes[3+i]
		}
	}
	c.Failover(t, replica)
	c.WaitHealthy(t)
	if got := c.MasterFor(t, key); got != replica {
		t.Fatalf("after CLUSTER FAILOVER %s serves %s, want %s", got, key, replica)
	}
	if r := c.Role(t, m); r != "slave" {
		t.Fatalf("the old master is %s, want slave", r)
	}

	replica.Kill()
	c.WaitTakeover(t, replica)
	if err := c.Client(t).Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET after the takeover: %v", err)
	}
	replica.Restart()
	c.WaitHealthy(t)
	if got := c.MasterFor(t, key); got != m {
		t.Fatalf("after killing %s, %s serves %s, want %s", replica, got, key, m)
	}
	if r := c.Role(t, replica); r != "slave" {
		t.Fatalf("the restarted master is %s, want slave", r)
	}
}
