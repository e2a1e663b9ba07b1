package clustertest

import (
	"net/http"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// The Redis Cluster's own failures: a master restarted, a
// coordinated failover, a master killed and replaced by its replica, each
// under a steady stream of requests at B (20/s) for a type whose node is on
// A and a type whose node is on B. Nothing hangs, nothing fails in
// transport, every request gets one answer (200, 502 or 503), and once
// Redis is whole again both types work through B without restarting
// anything.

// channelMaster is the cluster node serving instance i's envelope channel.
func (p *redisPair) channelMaster(i *Instance) *redistest.Server {
	return p.c.Redis.MasterFor(p.t, p.c.Namespace+":inst:"+i.ID())
}

// Every master in turn stops (its slots are unserved: no replica) and comes
// back empty, under traffic.
func TestRedisClusterMasterRestartDuringTraffic(t *testing.T) {
	rc := redistest.StartCluster(t, redistest.ClusterOptions{})
	p := newPair(t, Config{RedisCluster: rc})
	tr := startTraffic(t, p.b, p.key, 50*time.Millisecond, "a", "b")
	time.Sleep(time.Second) // steady traffic first
	for i, m := range rc.Nodes {
		m.Stop()
		time.Sleep(time.Second) // traffic while a third of the slots is unserved
		back := time.Now()
		m.Restart()
		rc.WaitHealthy(t)
		p.recovered(back, "master "+string(rune('1'+i))+" of 3 came back")
	}
	checkClusterShots(t, tr.Stop())
}

// A coordinated failover (CLUSTER FAILOVER on the replica) of the master
// serving A's channel (the owner's: assigns go there), then kill -9 of the
// master serving B's channel (the requester's: results come back there),
// then, if it is another master, kill -9 of the one serving A's channel. A
// killed master's replica takes over after cluster-node-timeout (2 s
// here); meanwhile what needs the dead master fails fast with 503.
func TestRedisClusterFailoverDuringTraffic(t *testing.T) {
	rc := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: true})
	p := newPair(t, Config{RedisCluster: rc})
	tr := startTraffic(t, p.b, p.key, 50*time.Millisecond, "a", "b")
	time.Sleep(time.Second)

	replicaOf := func(m *redistest.Server) *redistest.Server {
		for i, n := range rc.Nodes {
			if n == m {
				return rc.Nodes[(i+3)%6] // Nodes[3+i] replicates Nodes[i] (and after a failover, the reverse)
			}
		}
		t.Fatalf("%s is not in the cluster", m)
		return nil
	}
	start := time.Now()
	rc.Failover(t, replicaOf(p.channelMaster(p.a)))
	p.recovered(start, "a failover of the master serving A's channel")

	kill := func(m *redistest.Server, what string) {
		killed := time.Now()
		m.Kill()
		rc.WaitTakeover(t, m)
		t.Logf("the replica of the killed master took over %s after the kill", time.Since(killed).Round(time.Millisecond))
		p.recovered(killed, "kill -9 of "+what)
	}
	mb := p.channelMaster(p.b)
	kill(mb, "the master serving B's channel")
	if ma := p.channelMaster(p.a); ma != mb && ma != replicaOf(mb) {
		kill(ma, "the master serving A's channel")
	} else {
		t.Log("A's and B's channels share a shard, which has no replica left: no second kill")
	}
	time.Sleep(500 * time.Millisecond)
	checkClusterShots(t, tr.Stop())
}

// checkClusterShots checks a traffic run across a Redis Cluster fault:
// every request got one answer in time, and one the cluster could carry.
func checkClusterShots(t *testing.T, shots []shot) {
	t.Helper()
	counts := map[string]int{}
	for _, s := range shots {
		counts[s.typ+" "+http.StatusText(s.code)+" "+s.ec]++
		switch {
		case s.err != nil:
			t.Errorf("request %v: a transport error", s)
		case s.took > taskTimeout+time.Second:
			t.Errorf("request %v: longer than the task timeout (%s) plus 1s", s, taskTimeout)
		case s.code != http.StatusOK && s.code != http.StatusBadGateway && s.code != http.StatusServiceUnavailable:
			t.Errorf("request %v: want 200, 502 or 503", s)
		}
	}
	t.Logf("%d requests: %v", len(shots), counts)
	if len(shots) < 50 {
		t.Errorf("only %d requests were sent", len(shots))
	}
}
