package server

import (
	"fmt"
	"testing"
	"time"

	"switchyard/internal/pgtest"
	"switchyard/internal/redistest"
)

// Invariant 11 end to end: two instances on one Redis; a node registers
// on A, and the moment it has node_registered a request sent to B for its
// task type (one no other node has) is served by it, never 404. Each
// round uses a fresh task type, so B cannot have learned of it earlier.
func TestRoutableEverywhereOnceRegistered(t *testing.T) {
	redistest.Client(t)
	ns, db := redistest.Namespace(t), pgtest.SchemaURL(t, "dir")
	multi := func(c *Config) {
		c.RedisURL, c.Namespace, c.DatabaseURL, c.MaxNodesPerAccount = redistest.URL(), ns, db, 100
	}
	a := startApp(t, multi)
	b := startApp(t, multi)
	key := a.account(t, "alice", "")
	for i := 0; i < 10; i++ {
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
