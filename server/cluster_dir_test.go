package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// Invariant 11 end to end: two instances on one Redis, and on a Redis
// Cluster of three masters (sharded pub/sub); a node registers on A, and
// the moment it has node_registered a request sent to B for its task type
// (one no other node has) is served by it, never 404: 100 rounds each
// (the bar: 0 of 100 refused). Each round uses a fresh task type,
// so B cannot have learned of it earlier.
func TestRoutableEverywhereOnceRegistered(t *testing.T) {
	run := func(t *testing.T, url string, cluster bool) {
		ns, db := "sytest-dir-"+fmt.Sprint(time.Now().UnixNano()), pgtest.SchemaURL(t, "dir")
		if !cluster {
			ns = redistest.Namespace(t)
		}
		multi := func(c *Config) {
			c.RedisURL, c.RedisCluster, c.Namespace, c.DatabaseURL, c.MaxNodesPerAccount = url, cluster, ns, db, 200
		}
		a := startApp(t, multi)
		b := startApp(t, multi)
		key := a.account(t, "alice", "")
		for i := range 100 {
			capability := fmt.Sprintf("fresh-%d", i)
			n := connectNode(t, a.wsURL, reg(key, "n"+capability, capability))
			ch := b.requestAsync(key, map[string]any{"task_type": capability, "content": "x"})
			id := n.Expect("task_assign").Payload["task_id"].(string)
			n.Result(id, "completed", "ok")
			r := waitFor(t, ch, 5*time.Second)
			if r.err != nil || r.code != 200 {
				t.Fatalf("round %d: request on B right after node_registered on A: %d %s %v", i, r.code, r.body, r.err)
			}
		}
	}
	t.Run("redis", func(t *testing.T) {
		redistest.Client(t)
		run(t, redistest.URL(), false)
	})
	t.Run("cluster", func(t *testing.T) {
		run(t, redistest.StartCluster(t, redistest.ClusterOptions{}).URL(), true)
	})
}
