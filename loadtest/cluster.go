package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
)

// Instance is one switchyard instance of a run.
type Instance struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	URL   string `json:"url"`
	PID   int    `json:"pid,omitempty"` // 0 for a --target
	Log   string `json:"log,omitempty"`

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, once exited is closed
}

// WSURL is the node socket's address.
func (in *Instance) WSURL() string {
	return "ws" + strings.TrimPrefix(in.URL, "http") + "/ws/node"
}

// Exited reports whether a started instance's process has ended.
func (in *Instance) Exited() bool {
	if in.exited == nil {
		return false
	}
	select {
	case <-in.exited:
		return true
	default:
		return false
	}
}

// cluster is the instances of one configuration's run and the keys to use
// them: started here (with their own Redis namespace and PostgreSQL
// schema, removed afterwards) or given as targets.
type cluster struct {
	insts      []*Instance
	clientKeys []string
	nodeKeys   []string

	ns     string // Redis namespace, spawn mode
	schema string // PostgreSQL schema, spawn mode
	dbURL  string
	rdb    redis.UniversalClient // a *redis.ClusterClient on a Redis Cluster
	pg     *pgx.Conn
}

// targetCluster uses the first n targets; nodes and clients share the keys.
func targetCluster(cfg config.Config, n int) *cluster {
	c := &cluster{clientKeys: cfg.APIKeys, nodeKeys: cfg.APIKeys}
	for i := range n {
		c.insts = append(c.insts, &Instance{Index: i, Name: fmt.Sprintf("target-%d", i+1), URL: strings.TrimRight(cfg.Targets[i], "/")})
	}
	return c
}

// startCluster starts n instances of bin on free loopback ports, sharing a
// fresh Redis namespace and a fresh PostgreSQL schema, and creates the
// accounts the nodes and clients use.
func startCluster(ctx context.Context, cfg config.Config, n int, bin, logDir string) (_ *cluster, err error) {
	id := randHex(5)
	c := &cluster{ns: "loadtest-" + id, schema: "loadtest_" + id}
	defer func() {
		if err != nil {
			c.close()
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

func (c *cluster) startInstance(ctx context.Context, cfg config.Config, bin string, i int, logDir, dataDir string) (*Instance, error) {
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
		in.cmd.Process.Kill()
		<-in.exited
		return nil, fmt.Errorf("instance %d: %w\n%s", i+1, err, tail(in.Log, 20))
	}
	return in, nil
}

// waitReady polls the readiness endpoint until it answers 200.
func waitReady(ctx context.Context, in *Instance, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	for {
		if in.Exited() {
			return fmt.Errorf("exited before it was ready (%v)", in.err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.URL+"/api/health", nil)
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v", limit)
		case <-time.After(50 * time.Millisecond): // another process: nothing to wait on but its answer
		}
	}
}

// kill sends SIGKILL (kill -9) to an instance.
func (in *Instance) kill() error { return in.cmd.Process.Signal(syscall.SIGKILL) }

// terminate sends SIGTERM: the instance drains and exits.
func (in *Instance) terminate() error { return in.cmd.Process.Signal(syscall.SIGTERM) }

// close stops the instances (a drain, then a kill after 15 s) and removes
// the namespace and schema. It is safe to call on a half-built cluster.
func (c *cluster) close() {
	for _, in := range c.insts {
		if in.cmd != nil && !in.Exited() {
			_ = in.terminate()
		}
	}
	for _, in := range c.insts {
		if in.cmd == nil {
			continue
		}
		select {
		case <-in.exited:
		case <-time.After(15 * time.Second):
			_ = in.kill()
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

func randHex(n int) string {
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

// buildSwitchyard builds cmd/switchyard of the module that contains the
// working directory into dir.
func buildSwitchyard(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "switchyard")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/switchyard")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/switchyard in %s: %w\n%s", root, err, b)
	}
	return out, nil
}

// buildLoadtest builds this load test of the module that contains the
// working directory into dir (its tests run the binary).
func buildLoadtest(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "loadtest")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join(root, "loadtest") // a module of its own
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", cmd.Dir, err, b)
	}
	return out, nil
}

// rootModule is the path of the module that holds cmd/switchyard.
const rootModule = "github.com/switchyard-dev/switchyard"

// moduleRoot finds the directory of the switchyard module's go.mod (not
// the load test's own, nested one), from the working directory upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module "+rootModule+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the switchyard module, so switchyard cannot be built here: pass --switchyard PATH")
		}
		dir = parent
	}
}
