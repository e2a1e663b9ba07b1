package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
)

// Cluster is the instances of one configuration's run and the keys to use
// them: started here (with their own Redis namespace and PostgreSQL
// schema, removed by Close) or given as targets.
type Cluster struct {
	insts      []*Instance
	clientKeys []string
	nodeKeys   []string

	ns     string // Redis namespace, spawn mode
	schema string // PostgreSQL schema, spawn mode
	dbURL  string
	rdb    redis.UniversalClient // a *redis.ClusterClient on a Redis Cluster
	pg     *pgx.Conn
}

// Targets uses the first n of cfg's targets; nodes and clients share the
// keys.
func Targets(cfg config.Config, n int) *Cluster {
	c := &Cluster{clientKeys: cfg.APIKeys, nodeKeys: cfg.APIKeys}
	for i := range n {
		c.insts = append(c.insts, &Instance{Index: i, Name: fmt.Sprintf("target-%d", i+1), URL: strings.TrimRight(cfg.Targets[i], "/")})
	}
	return c
}

// Start starts n instances of bin on free loopback ports, sharing a
// fresh Redis namespace and a fresh PostgreSQL schema, and creates the
// accounts the nodes and clients use.
func Start(ctx context.Context, cfg config.Config, n int, bin, logDir string) (_ *Cluster, err error) {
	id := RandHex(5)
	c := &Cluster{ns: "loadtest-" + id, schema: "loadtest_" + id}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	if c.rdb, err = redisClient(cfg); err != nil {
		return nil, err
	}
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("the Redis at %s is unreachable: %w", cfg.RedisURL, err)
	}
	c.pg, err = pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL at --database-url is unreachable: %w", err)
	}
	if _, err := c.pg.Exec(ctx, "CREATE SCHEMA "+c.schema); err != nil {
		c.schema = ""
		return nil, fmt.Errorf("create schema: %w", err)
	}
	c.dbURL, err = withSearchPath(cfg.DatabaseURL, c.schema)
	if err != nil {
		return nil, err
	}

	dataDir := filepath.Join(logDir, "data-"+id)
	for i := range n {
		in, err := c.startInstance(ctx, cfg, bin, i, logDir, dataDir)
		if err != nil {
			return nil, err
		}
		c.insts = append(c.insts, in)
	}

	// One account per key: clients spread over ClientAccounts keys, nodes
	// over NodeAccounts (each instance allows Nodes per account, so the
	// node cap never binds).
	names := make([]string, 0, cfg.ClientAccounts+cfg.NodeAccounts)
	for i := range cfg.ClientAccounts {
		names = append(names, fmt.Sprintf("loadtest-client-%d", i+1))
	}
	for i := range cfg.NodeAccounts {
		names = append(names, fmt.Sprintf("loadtest-node-%d", i+1))
	}
	keys := make([]string, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			keys[i], errs[i] = createAccount(ctx, bin, c.dbURL, name)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c.clientKeys, c.nodeKeys = keys[:cfg.ClientAccounts], keys[cfg.ClientAccounts:]
	return c, nil
}

func (c *Cluster) startInstance(ctx context.Context, cfg config.Config, bin string, i int, logDir, dataDir string) (*Instance, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-%d", c.ns, i+1)
	in := &Instance{Index: i, Name: name, URL: "http://127.0.0.1:" + strconv.Itoa(port),
		Log: filepath.Join(logDir, name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(in.Log)
	if err != nil {
		return nil, err
	}
	args := []string{"serve",
		"--listen", "127.0.0.1:" + strconv.Itoa(port),
		"--instance-name", name,
		"--redis-url", cfg.RedisURL, "--namespace", c.ns,
		"--database-url", c.dbURL, "--data-dir", dataDir,
		// Rate limits off, so that they cannot cap the run, and room for
		// every node on one account. Every node and client comes from
		// 127.0.0.1: no cap on one address's connections.
		"--request-rate", "-1", "--public-rate", "-1", "--handshake-rate", "-1",
		"--max-nodes-per-account", strconv.Itoa(cfg.Nodes + 1),
		"--max-conns-per-ip", "-1",
		"--task-timeout", cfg.TaskTimeout.String(),
		"--log-level", "info",
	}
	if cfg.RedisCluster {
		args = append(args, "--redis-cluster")
	}
	args = append(args, cfg.ServeArgs...)
	in.cmd = exec.Command(bin, args...)
	in.cmd.Stdout, in.cmd.Stderr = logf, logf
	if err := in.cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	in.PID = in.cmd.Process.Pid
	go func() {
		in.err = in.cmd.Wait()
		_ = logf.Close()
		close(in.exited)
	}()
	if err := waitReady(ctx, in, 30*time.Second); err != nil {
		_ = in.Kill()
		<-in.exited
		return nil, fmt.Errorf("instance %d: %w\n%s", i+1, err, tail(in.Log, 20))
	}
	return in, nil
}

// Instances are the cluster's instances, in order.
func (c *Cluster) Instances() []*Instance { return c.insts }

// ClientKeys are the API keys the clients spread over.
func (c *Cluster) ClientKeys() []string { return c.clientKeys }

// NodeKeys are the API keys the nodes spread over.
func (c *Cluster) NodeKeys() []string { return c.nodeKeys }

// Redis is a client of the instances' Redis (a cluster client on a Redis
// Cluster), or nil for targets, whose Redis is not known here.
func (c *Cluster) Redis() redis.UniversalClient { return c.rdb }

// Close stops the instances (a drain, then a kill after 15 s) and removes
// the namespace and schema. It is safe to call on a half-built cluster.
func (c *Cluster) Close() {
	for _, in := range c.insts {
		if in.cmd != nil && !in.Exited() {
			_ = in.Terminate()
		}
	}
	for _, in := range c.insts {
		if in.cmd == nil {
			continue
		}
		select {
		case <-in.exited:
		case <-time.After(15 * time.Second):
			_ = in.Kill()
			<-in.exited
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.pg != nil {
		if c.schema != "" {
			_, _ = c.pg.Exec(ctx, "DROP SCHEMA "+c.schema+" CASCADE")
		}
		_ = c.pg.Close(ctx)
	}
	if c.rdb != nil {
		// On a cluster every master holds some of the keys: SCAN and DEL
		// on each (a key is deleted on the master that has it, so no
		// command crosses slots).
		_ = forEachMaster(ctx, c.rdb, func(ctx context.Context, m *redis.Client) error {
			for _, pattern := range []string{c.ns + ":*", "*:" + c.ns + ":*"} {
				iter := m.Scan(ctx, 0, pattern, 1000).Iterator()
				for iter.Next(ctx) {
					m.Del(ctx, iter.Val())
				}
			}
			return nil
		})
		_ = c.rdb.Close()
	}
}

// createAccount runs `switchyard accounts create` and returns the key it
// prints on its last line.
func createAccount(ctx context.Context, bin, dbURL, name string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, "accounts", "create", "--name", name, "--database-url", dbURL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("switchyard accounts create --name %s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key := strings.TrimSpace(lines[len(lines)-1])
	if key == "" || strings.Contains(key, " ") {
		return "", fmt.Errorf("switchyard accounts create --name %s printed no key on its last line", name)
	}
	return key, nil
}

// withSearchPath adds search_path=schema to a PostgreSQL URL.
func withSearchPath(dbURL, schema string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("--database-url: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RandHex is n random bytes in hex: the names that keep one run's
// namespace, schema, task types and nodes apart from another's.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tail returns the last n lines of a file, for an error message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
