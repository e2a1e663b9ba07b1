package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-dev/switchyard/internal/redistest"
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

// NewCluster builds the same cluster without a test (the load test's way);
// Stop kills its servers and removes the directory it made.
func TestNewClusterAndStop(t *testing.T) {
	ctx := context.Background()
	c, err := redistest.NewCluster(ctx, redistest.ClusterOptions{})
	if errors.Is(err, redistest.ErrNoRedisServer) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	opt, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClusterClient(opt)
	defer rdb.Close()
	for i := range 10 {
		if err := rdb.Set(ctx, fmt.Sprintf("k%d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range c.Nodes {
		if !s.Running() {
			t.Fatalf("%s is not running", s)
		}
	}
	c.Stop()
	stopped = true
	for _, s := range c.Nodes {
		if s.Running() {
			t.Errorf("%s still runs after Stop", s)
		}
		if conn, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err == nil {
			_ = conn.Close()
			t.Errorf("%s still accepts connections after Stop", s)
		}
	}
	c.Stop() // a second Stop does nothing
}
