package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions shapes a test cluster. The zero value is three masters
// without replicas.
type ClusterOptions struct {
	// Replicas gives each master one replica, for failover tests.
	Replicas bool
	// NodeTimeout is cluster-node-timeout: how long a master may be
	// unreachable before its replica takes over. Default 2s.
	NodeTimeout time.Duration
	// Dir holds the nodes' working directories (node-1, node-2, …: each
	// with its nodes.conf and redis.log). Default: for StartCluster a
	// t.TempDir(); for NewCluster a new temporary directory, which Stop
	// removes (a Dir given here is left in place).
	Dir string
}

// Cluster is a Redis Cluster of three masters (and their replicas) on
// loopback, made of redis-server processes the test owns.
type Cluster struct {
	// Nodes are the cluster's servers: masters first (Nodes[i] serves slot
	// range i of 3 at the start), then Nodes[3+i], the replica of Nodes[i].
	// Roles change when a replica takes over; Role tells the current one.
	Nodes []*Server

	tempDir string // made by NewCluster; Stop removes it
}

// The three masters' slot ranges, as redis-cli --cluster create splits them.
var slotRanges = [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

// StartCluster starts a Redis Cluster: 3 masters (with opts.Replicas, one
// replica each) on free loopback ports (bus ports too) below 32768, cluster-enabled, no
// persistence, cluster-config-file in t.TempDir(). It joins them with
// CLUSTER MEET, ADDSLOTSRANGE and REPLICATE (what redis-cli --cluster
// create does, without needing redis-cli), and returns once every node says
// cluster_state:ok, every slot is covered and every replica is in sync.
// Everything is killed when the test ends, or when the test binary dies.
// It skips the test if redis-server is not installed.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	requireBinary(t)
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := newCluster(ctx, opts, t)
	if err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// NewCluster is StartCluster for a program that is not a test: it builds
// the same cluster (waiting at most until ctx ends, and 30 s for each of
// the join and the health check) and returns it, or an error wrapping
// ErrNoRedisServer if redis-server is not installed. The caller must call
// Stop; the servers also die with the calling process (on Linux), whatever
// way it ends. Its servers' Restart panics on failure rather than failing
// a test.
func NewCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if err := lookBinary(); err != nil {
		return nil, err
	}
	return newCluster(ctx, opts, nil)
}

// newCluster starts, joins and checks the cluster; t (nil for NewCluster)
// is given to the servers. On error, whatever was started is stopped.
func newCluster(ctx context.Context, opts ClusterOptions, t testing.TB) (_ *Cluster, err error) {
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = 2 * time.Second
	}
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if opts.Dir == "" {
		if c.tempDir, err = os.MkdirTemp("", "redistest-cluster-"); err != nil {
			return nil, err
		}
		opts.Dir = c.tempDir
	}
	n := 3
	if opts.Replicas {
		n = 6
	}
	for i := range n {
		dir := filepath.Join(opts.Dir, "node-"+strconv.Itoa(i+1))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		s := &Server{t: t, dir: dir, args: []string{"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
			// A test kills masters on purpose: the others keep serving
			// their slots, and a replica of any age may take over.
			"--cluster-require-full-coverage", "no", "--cluster-replica-validity-factor", "0",
			// Sharded pub/sub while a slot is failed over: let a test
			// read from any node it asks.
			"--cluster-allow-pubsubshard-when-down", "yes"}}
		if err := s.startOnFreePort(true); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.join(jctx); err != nil {
		return nil, err
	}
	if err := c.waitHealthy(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Stop kills every server of the cluster (SIGKILL: nothing is persisted)
// and removes the temporary directory NewCluster made. StartCluster's
// cluster is stopped when the test ends; stopping it twice does nothing.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, s := range c.Nodes {
		wg.Go(s.Stop)
	}
	wg.Wait()
	if c.tempDir != "" {
		_ = os.RemoveAll(c.tempDir)
		c.tempDir = ""
	}
}

func (c *Cluster) join(ctx context.Context) error {
	clients := make([]*redis.Client, len(c.Nodes))
	ids := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer clients[i].Close()
		id, err := clients[i].ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", s.Addr(), err)
		}
		ids[i] = id
	}
	for i := range 3 {
		// Distinct config epochs, as redis-cli sets them: a failover
		// then never has to resolve a collision first.
		if err := clients[i].Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", c.Nodes[i].Addr(), err)
		}
		r := slotRanges[i]
		if err := clients[i].ClusterAddSlotsRange(ctx, r[0], r[1]).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", c.Nodes[i].Addr(), r[0], r[1], err)
		}
	}
	for _, s := range c.Nodes[1:] {
		if err := clients[0].ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(s.Port)).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", s.Addr(), err)
		}
	}
	// A replica can follow its master only once it knows it.
	for i := 3; i < len(c.Nodes); i++ {
		master := ids[i-3]
		err := waitFor(ctx, 20*time.Second, func(ctx context.Context) error {
			return clients[i].ClusterReplicate(ctx, master).Err()
		})
		if err != nil {
			return fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", c.Nodes[i].Addr(), master, err)
		}
	}
	return nil
}

// WaitHealthy waits (up to 30 s) until every running node says
// cluster_state:ok with all 16384 slots served, knows every node, and has
// the same view of which node serves each slot as the others, and every
// replica's link to its master is up. It fails the test otherwise.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	if err := c.waitHealthy(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitHealthy is WaitHealthy's check, for at most 30 s or until ctx ends.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	err := waitFor(ctx, 30*time.Second, func(ctx context.Context) error {
		var view string
		for _, s := range c.Nodes {
			if !s.Running() {
				continue
			}
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			err := func() error {
				defer rdb.Close()
				info, err := rdb.ClusterInfo(ctx).Result()
				if err != nil {
					return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr(), err)
				}
				f := infoFields(info)
				if f["cluster_state"] != "ok" || f["cluster_slots_ok"] != "16384" || f["cluster_known_nodes"] != strconv.Itoa(len(c.Nodes)) {
					return fmt.Errorf("%s: state %s, slots ok %s, known nodes %s", s.Addr(),
						f["cluster_state"], f["cluster_slots_ok"], f["cluster_known_nodes"])
				}
				v, err := slotView(ctx, rdb)
				if err != nil {
					return fmt.Errorf("%s: CLUSTER SLOTS: %w", s.Addr(), err)
				}
				if view == "" {
					view = v
				} else if v != view {
					return fmt.Errorf("%s: slots %s, another node says %s", s.Addr(), v, view)
				}
				repl, err := rdb.Info(ctx, "replication").Result()
				if err != nil {
					return err
				}
				if r := infoFields(repl); r["role"] == "slave" && r["master_link_status"] != "up" {
					return fmt.Errorf("%s: replica link %s", s.Addr(), r["master_link_status"])
				}
				return nil
			}()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis cluster not healthy after 30s: %w", err)
	}
	return nil
}

// slotView is a node's answer to "who serves which slots, and who follows
// them", in a form two nodes' answers can be compared by.
func slotView(ctx context.Context, rdb *redis.Client) (string, error) {
	//lint:ignore SA1019 CLUSTER SLOTS names each slot range's serving master first, all this compares; SHARDS lists failed nodes too
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	parts := make([]string, 0, len(slots))
	for _, s := range slots {
		p := fmt.Sprintf("%d-%d:", s.Start, s.End)
		for _, n := range s.Nodes {
			p += n.Addr + ","
		}
		parts = append(parts, p)
	}
	slices.Sort(parts)
	return strings.Join(parts, " "), nil
}

func infoFields(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// Addrs are the seed addresses (host:port) of the three original masters.
func (c *Cluster) Addrs() []string {
	out := make([]string, 3)
	for i := range out {
		out[i] = c.Nodes[i].Addr()
	}
	return out
}

// URL is the cluster's URL for redis.ParseClusterURL (and switchyard's
// --redis-cluster): redis://127.0.0.1:P1?addr=127.0.0.1:P2&addr=127.0.0.1:P3.
func (c *Cluster) URL() string {
	a := c.Addrs()
	return "redis://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2]
}

// Client returns a cluster client on the seed addresses, closed when the
// test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	opt, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Role is "master" or "slave", as the node itself says (ROLE).
func (c *Cluster) Role(t testing.TB, s *Server) string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rdb.Close()
	v, err := rdb.Do(context.Background(), "ROLE").Slice()
	if err != nil || len(v) == 0 {
		t.Fatalf("%s: ROLE: %v", s.Addr(), err)
	}
	return fmt.Sprint(v[0])
}

// MasterFor returns the server that serves key's slot now (CLUSTER SLOTS
// asked of a running node).
func (c *Cluster) MasterFor(t testing.TB, key string) *Server {
	t.Helper()
	slot := Slot(key)
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		//lint:ignore SA1019 CLUSTER SLOTS names each slot range's serving master first, all this compares; SHARDS lists failed nodes too
		slots, err := rdb.ClusterSlots(context.Background()).Result()
		_ = rdb.Close()
		if err != nil {
			continue
		}
		for _, r := range slots {
			if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
				for _, n := range c.Nodes {
					if n.Addr() == r.Nodes[0].Addr {
						return n
					}
				}
			}
		}
	}
	t.Fatalf("no running node knows who serves slot %d", slot)
	return nil
}

// Failover runs CLUSTER FAILOVER on replica (a coordinated, lossless
// hand-over) and waits until it says it is a master.
func (c *Cluster) Failover(t testing.TB, replica *Server) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rdb.Close()
	if err := rdb.ClusterFailover(context.Background()).Err(); err != nil {
		t.Fatalf("%s: CLUSTER FAILOVER: %v", replica.Addr(), err)
	}
	err := waitFor(context.Background(), 30*time.Second, func(ctx context.Context) error {
		if r := c.Role(t, replica); r != "master" {
			return fmt.Errorf("%s is still %s", replica.Addr(), r)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
}

// WaitTakeover waits (up to 30 s) until no running node names dead as the
// master of any slot (its replica took over), then until the cluster is
// healthy again. Kill a master, then call it.
func (c *Cluster) WaitTakeover(t testing.TB, dead *Server) {
	t.Helper()
	err := waitFor(context.Background(), 30*time.Second, func(ctx context.Context) error {
		for _, s := range c.Nodes {
			if !s.Running() {
				continue
			}
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			//lint:ignore SA1019 CLUSTER SLOTS names each slot range's serving master first, all this compares; SHARDS lists failed nodes too
			slots, err := rdb.ClusterSlots(ctx).Result()
			_ = rdb.Close()
			if err != nil {
				return err
			}
			for _, r := range slots {
				if len(r.Nodes) > 0 && r.Nodes[0].Addr == dead.Addr() {
					return fmt.Errorf("%s still names %s master of %d-%d", s.Addr(), dead.Addr(), r.Start, r.End)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("no takeover: %v", err)
	}
	c.WaitHealthy(t)
}

// Slot is the cluster slot of key (CRC16 of the key or of its {hash tag},
// mod 16384), as the servers compute it.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC-16/XMODEM, Redis Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
