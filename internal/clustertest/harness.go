// Package clustertest runs switchyard clusters as real OS processes, for the
// tests only processes can show: kill -9, SIGTERM drains, a Redis restart
// under several instances, two instances racing for one node.
//
// Main builds the switchyard binary once per test run. New gives a test a
// cluster: its own Redis namespace (the shared test Redis, or a private
// redis-server the test may kill) and its own PostgreSQL schema. Start runs
// an instance on a free loopback port and waits until it is ready; every
// process is killed and waited for when the test ends, and its stderr (JSON
// logs) is printed if the test failed. RunNode runs an SDK node agent in the
// test process and Balancer is a tiny TCP load balancer for nodes that must
// find another instance when theirs goes away.
package clustertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// binary is the switchyard executable Main built.
var binary string

// Main builds the switchyard binary, runs the tests, checks that no
// goroutine outlived them and removes the build. Call it from TestMain.
// With SWITCHYARD_CLUSTERTEST_RACE=1 the binary is built with -race, so the
// instances' own data races show in their logs (and make them exit 66).
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "switchyard-clustertest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "clustertest:", err)
		os.Exit(1)
	}
	binary, err = build(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "clustertest:", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m,
		// net/http keeps idle client connections' goroutines until they time out.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.Cleanup(func(code int) {
			_ = os.RemoveAll(dir)
			os.Exit(code)
		}),
	)
}

// build compiles cmd/switchyard into dir with the go command on PATH.
func build(dir string) (string, error) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is not on PATH, so the switchyard binary cannot be built: %w", err)
	}
	out := filepath.Join(dir, "switchyard")
	args := []string{"build", "-o", out}
	if os.Getenv("SWITCHYARD_CLUSTERTEST_RACE") == "1" {
		args = append(args, "-race")
	}
	args = append(args, "github.com/switchyard-dev/switchyard/cmd/switchyard")
	cmd := exec.Command(gocmd, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// Config says what a cluster shares.
type Config struct {
	// RedisURL is the Redis the instances share; default the shared test
	// Redis (redistest.URL), which must be reachable. Give a private
	// redistest.Server's URL to kill or restart Redis in the test.
	RedisURL string
	// RedisCluster, when set, is the Redis Cluster the instances share
	// (--redis-cluster --redis-url with its seed addresses): sharded
	// pub/sub, keys spread over three masters. See OnEachRedis.
	RedisCluster *redistest.Cluster
	// NoRedis starts instances without --redis-url.
	NoRedis bool
	// NoPostgres starts instances without --database-url (each keeps
	// SQLite in a data directory of its own).
	NoPostgres bool
}

// Cluster is the shared state of one test's instances: a Redis namespace,
// a PostgreSQL schema and an HTTP client.
type Cluster struct {
	t           testing.TB
	RedisURL    string             // "" with Config.NoRedis
	Redis       *redistest.Cluster // with Config.RedisCluster; nil on a single Redis
	Namespace   string
	DatabaseURL string // "" with Config.NoPostgres
	HTTP        *http.Client
}

// New prepares a cluster for t. Its schema and Redis keys are removed when
// the test ends, after every process started on it is gone.
func New(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if binary == "" {
		t.Fatal("clustertest: the switchyard binary is not built; call clustertest.Main from TestMain")
	}
	c := &Cluster{t: t}
	switch {
	case cfg.NoRedis:
	case cfg.RedisCluster != nil:
		c.RedisURL, c.Redis = cfg.RedisCluster.URL(), cfg.RedisCluster
		c.Namespace = "ct-" + randomHex(6) // the cluster is the test's own: nothing to clean
	case cfg.RedisURL != "":
		c.RedisURL = cfg.RedisURL
		c.Namespace = "ct-" + randomHex(6)
	default:
		redistest.Client(t) // fails (or skips) clearly when the shared Redis is not there
		c.RedisURL = redistest.URL()
		c.Namespace = redistest.Namespace(t)
	}
	if !cfg.NoPostgres {
		c.DatabaseURL = pgtest.SchemaURL(t, "ct")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	c.HTTP = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return c
}

// OnEachRedis runs f twice, as the subtests "redis" (the shared single
// Redis) and "cluster" (a private Redis Cluster of three masters, started
// for the subtest): the promises of the multi-instance mode hold on both
// f gets the Config to pass to New; it may add to it.
func OnEachRedis(t *testing.T, f func(t *testing.T, cfg Config)) {
	t.Run("redis", func(t *testing.T) { f(t, Config{}) })
	t.Run("cluster", func(t *testing.T) {
		f(t, Config{RedisCluster: redistest.StartCluster(t, redistest.ClusterOptions{})})
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Account creates an account with `switchyard accounts create` on the
// cluster's store and returns its API key (the last line of stdout). It
// also migrates a fresh schema, so instances started afterwards do not
// queue on the migration lock.
func (c *Cluster) Account(name string) string {
	c.t.Helper()
	args := []string{"accounts", "create", "--name", name}
	if c.DatabaseURL != "" {
		args = append(args, "--database-url", c.DatabaseURL)
	} else {
		c.t.Fatal("clustertest: Account needs PostgreSQL (Config.NoPostgres is set)")
	}
	stdout, stderr, err := c.Run(30*time.Second, args...)
	if err != nil {
		c.t.Fatalf("switchyard %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Run runs the switchyard binary once (an admin command) and returns its
// output; err is its exit error.
func (c *Cluster) Run(timeout time.Duration, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = childEnv()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// childEnv is the test's environment without SWITCHYARD_* variables: every
// flag of serve can be set from one, and an instance must run with the
// flags its test gave it and nothing else.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SWITCHYARD_") {
			env = append(env, kv)
		}
	}
	return env
}

// freeAddr returns a loopback address with a port nobody listened on a
// moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// Instance is one `switchyard serve` process.
type Instance struct {
	t    testing.TB
	c    *Cluster
	Name string // --instance-name
	Addr string // host:port it listens on
	Args []string

	cmd    *exec.Cmd
	stderr *logBuffer
	done   chan struct{} // closed when the process has exited and been waited for

	mu sync.Mutex
	id string // instance_id, from /api/v1/status once ready
}

// Start runs an instance and waits until its /api/health answers 200.
// extra flags come last, so they override the harness's defaults.
func (c *Cluster) Start(name string, extra ...string) *Instance {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		i := c.Launch(name, extra...)
		err := i.waitReady(20 * time.Second)
		if err == nil {
			return i
		}
		// The free port freeAddr found may have been taken since by another
		// process on this machine: try another.
		if attempt < 3 && strings.Contains(i.Stderr(), "address already in use") {
			continue
		}
		c.t.Fatal(err)
	}
}

// AdminToken is every instance's --admin-token: Status and Nodes read the
// operator-only view, which names instances (public answers do not).
const AdminToken = "clustertest-admin-token-0123456789"

// Launch runs an instance and returns at once. The harness's defaults:
// JSON logs at info level, every rate limit off (-1), the admin token, and
// the cluster's Redis, namespace and database.
func (c *Cluster) Launch(name string, extra ...string) *Instance {
	c.t.Helper()
	addr := freeAddr(c.t)
	args := []string{"serve", "--listen", addr, "--instance-name", name,
		"--log-format", "json", "--log-level", "info", "--data-dir", c.t.TempDir(),
		"--request-rate", "-1", "--public-rate", "-1", "--handshake-rate", "-1",
		"--admin-token", AdminToken}
	if c.RedisURL != "" {
		args = append(args, "--redis-url", c.RedisURL, "--namespace", c.Namespace)
	}
	if c.Redis != nil {
		args = append(args, "--redis-cluster")
	}
	if c.DatabaseURL != "" {
		args = append(args, "--database-url", c.DatabaseURL)
	}
	args = append(args, extra...)
	return c.launch(name, addr, args)
}

func (c *Cluster) launch(name, addr string, args []string) *Instance {
	t := c.t
	t.Helper()
	i := &Instance{t: t, c: c, Name: name, Addr: addr, Args: args, stderr: &logBuffer{}, done: make(chan struct{})}
	i.cmd = exec.Command(binary, args...)
	i.cmd.Env = childEnv()
	i.cmd.Stdout, i.cmd.Stderr = i.stderr, i.stderr
	i.cmd.SysProcAttr = sysProcAttr()
	if os.Getenv("SWITCHYARD_TEST_LOG") != "" {
		w := io.MultiWriter(i.stderr, prefixWriter{prefix: name + ": ", w: os.Stderr})
		i.cmd.Stdout, i.cmd.Stderr = w, w
	}
	if err := i.cmd.Start(); err != nil {
		t.Fatalf("start instance %s: %v", name, err)
	}
	go func() {
		_ = i.cmd.Wait() // the exit status is in cmd.ProcessState
		close(i.done)
	}()
	t.Cleanup(func() {
		i.Kill()
		if strings.Contains(i.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("instance %s reported a data race (built with -race)", name)
		}
		if t.Failed() {
			t.Logf("--- instance %s (%s), args %q, %s; its output:\n%s", name, addr, args, i.exitState(), i.stderr.String())
		}
	})
	return i
}

// prefixWriter copies each write to w after a prefix (live logs while debugging).
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	_, _ = io.WriteString(p.w, p.prefix+string(b))
	return len(b), nil
}

// URL is the instance's base URL.
func (i *Instance) URL() string { return "http://" + i.Addr }

// WS is the instance's node socket URL.
func (i *Instance) WS() string { return "ws://" + i.Addr + "/ws/node" }

// Stderr is what the process has written so far (stdout and stderr).
func (i *Instance) Stderr() string { return i.stderr.String() }

// Exited is closed when the process has exited.
func (i *Instance) Exited() <-chan struct{} { return i.done }

// ExitCode is the process's exit code (-1 if a signal ended it); call it
// after Exited is closed.
func (i *Instance) ExitCode() int {
	<-i.done
	return i.cmd.ProcessState.ExitCode()
}

func (i *Instance) exitState() string {
	select {
	case <-i.done:
		return "exited: " + i.cmd.ProcessState.String()
	default:
		return "running"
	}
}

// WaitExit waits up to d for the process to exit and returns its exit code;
// it fails the test if the process is still running then.
func (i *Instance) WaitExit(d time.Duration) int {
	i.t.Helper()
	select {
	case <-i.done:
		return i.ExitCode()
	case <-time.After(d):
		i.t.Fatalf("instance %s still running %s later", i.Name, d)
	}
	return 0
}

// Kill kills the process with SIGKILL (as a crash would) and waits for it.
// It is idempotent.
func (i *Instance) Kill() { killWait(i.t, i.cmd, i.done, "instance "+i.Name) }

// killWait kills cmd with SIGKILL, unless it has exited (done is closed),
// and waits for it: 10 s at most, else the test fails.
func killWait(t testing.TB, cmd *exec.Cmd, done <-chan struct{}, what string) {
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("%s did not exit within 10s of SIGKILL", what)
	}
}

// Signal sends sig to the process.
func (i *Instance) Signal(sig os.Signal) {
	i.t.Helper()
	if err := i.cmd.Process.Signal(sig); err != nil {
		i.t.Fatalf("signal %v to instance %s: %v", sig, i.Name, err)
	}
}

// Terminate sends SIGTERM (a drain).
func (i *Instance) Terminate() { i.Signal(syscall.SIGTERM) }

func (i *Instance) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	last := "no answer"
	for {
		select {
		case <-i.done:
			return fmt.Errorf("instance %s exited before it was ready (%s):\n%s", i.Name, i.exitState(), i.Stderr())
		default:
		}
		r, err := i.Do(context.Background(), http.MethodGet, "/api/health", "", nil)
		if err == nil && r.Code == http.StatusOK {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("HTTP %d %s", r.Code, r.Body)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("instance %s not ready within %s (last: %s):\n%s", i.Name, d, last, i.Stderr())
		}
		time.Sleep(25 * time.Millisecond) // polling readiness: there is no event for it
	}
}

// ID is the instance's instance_id (from its /admin/api/status).
func (i *Instance) ID() string {
	i.t.Helper()
	i.mu.Lock()
	id := i.id
	i.mu.Unlock()
	if id != "" {
		return id
	}
	id = i.Status().InstanceID
	if id == "" {
		i.t.Fatalf("instance %s: /admin/api/status has no instance_id", i.Name)
	}
	i.mu.Lock()
	i.id = id
	i.mu.Unlock()
	return id
}

// logBuffer is a goroutine-safe buffer for a process's or a node's output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
