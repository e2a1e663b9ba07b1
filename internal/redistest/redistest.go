// Package redistest gives tests a Redis: the shared one (Client, URL,
// Namespace), a private redis-server on a free loopback port for tests that
// stop or restart Redis (StartServer), and a private Redis Cluster of three
// masters, with a replica each if asked (StartCluster). The private ones
// are real redis-server processes that die with the test binary.
//
// A program that is not a test (the load test) builds the same cluster
// with NewCluster, which needs no testing.TB and returns an error instead
// of failing a test; it stops it with Cluster.Stop.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process that the test (or the program) owns.
type Server struct {
	t    testing.TB // nil for a server of NewCluster's
	Port int        // the client port; a cluster node's bus port is Port+10000
	dir  string     // its working directory (a cluster node keeps nodes.conf here)
	args []string   // extra arguments (cluster mode)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartServer runs a fresh redis-server (no persistence) on a free loopback
// port and kills it when the test ends. It skips the test if redis-server
// is not installed (scripts/test.sh installs it).
func StartServer(t testing.TB) *Server {
	t.Helper()
	requireBinary(t)
	s := &Server{t: t, dir: t.TempDir()}
	if err := s.startOnFreePort(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Start is StartServer, the name callers used before clusters came.
func Start(t testing.TB) *Server { t.Helper(); return StartServer(t) }

func requireBinary(t testing.TB) {
	t.Helper()
	if err := lookBinary(); err != nil {
		t.Skipf("%v (scripts/test.sh installs it)", err)
	}
}

// ErrNoRedisServer is NewCluster's error when redis-server is not on PATH.
var ErrNoRedisServer = errors.New("redis-server is not installed")

func lookBinary() error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return fmt.Errorf("%w: %v", ErrNoRedisServer, err)
	}
	return nil
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a client of this server alone, closed when the test ends
// (a server of NewCluster's has no test: the caller closes it).
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	if s.t != nil {
		s.t.Cleanup(func() { _ = c.Close() })
	}
	return c
}

// startOnFreePort picks a loopback port (and, for a cluster node, its bus
// port +10000) that nobody listens on, and starts the server there. Another
// process may take the port between the check and the bind, so a server
// that exits at once is tried again on another port.
func (s *Server) startOnFreePort(cluster bool) error {
	lastErr := errors.New("no free port found")
	for range 20 {
		port := freePort(cluster)
		if port == 0 {
			continue
		}
		s.Port = port
		if lastErr = s.start(); lastErr == nil {
			return nil
		}
	}
	return fmt.Errorf("could not start redis-server on a free port: %w", lastErr)
}

// freePort returns a port that is free on loopback, and whose +10000 is
// free too when cluster is set (a cluster node's bus port), or 0. Ports are
// drawn at random from 10000–22767, so a bus port (20000–32767) stays below
// the kernel's ephemeral range (32768 and up on Linux): a bus port drawn
// inside it was once taken by a client connection's local port between
// this check and the server's bind, and the node exited after its client
// port had already accepted the harness's dial.
func freePort(cluster bool) int {
	port := 10000 + rand.IntN(ephemeralStart-10000-10000)
	ports := []int{port}
	if cluster {
		ports = append(ports, port+10000)
	}
	for _, p := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return 0
		}
		_ = l.Close()
	}
	return port
}

// ephemeralStart is where Linux's default ip_local_port_range begins.
const ephemeralStart = 32768

// start runs the server on s.Port and waits until it answers as itself:
// INFO's process_id is the process started here. A connection accepted is
// not enough: a cluster node listens on its client port before it binds its
// bus port, and exits if that bind fails; and a port another process took
// between freePort's check and the bind accepts connections too. It returns
// an error if the process exits first (a port was taken).
func (s *Server) start() error {
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log")}, s.args...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }() // ends when the process does; Stop waits for it
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pid, err := serverPID(s.Addr()); err == nil && pid == cmd.Process.Pid {
			s.mu.Lock()
			s.cmd, s.done = cmd, done
			s.mu.Unlock()
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited at once: %s", s.Addr(), lastLines(log))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server did not answer on %s within 10s", s.Addr())
		}
		time.Sleep(10 * time.Millisecond) // polling a port: there is no event for it
	}
}

// serverPID asks the Redis at addr for its process id (INFO server), in
// RESP by hand: a go-redis client logs every refused dial, and this is
// polled while the server starts.
func serverPID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := io.WriteString(c, "INFO server\r\n"); err != nil {
		return 0, err
	}
	rd := bufio.NewReader(c)
	head, err := rd.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if !strings.HasPrefix(head, "$") || err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("INFO answered %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rd, body); err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

func lastLines(b []byte) string {
	if len(b) > 500 {
		b = b[len(b)-500:]
	}
	return string(b)
}

// Stop kills the server with SIGKILL (as a crash would) and waits for it to
// exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Kill is Stop: kill -9, and wait for the process to be gone.
func (s *Server) Kill() { s.Stop() }

// Running reports whether the server's process is up (started and not
// killed by the test).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Restart kills the server and starts it again on the same port. Nothing
// is persisted, so the data is gone; a cluster node keeps its
// cluster-config-file, so it rejoins its cluster (as a replica, if it was
// failed over meanwhile). It fails the test if the server does not come
// back (a server of NewCluster's has no test to fail: it panics).
func (s *Server) Restart() {
	if s.t != nil {
		s.t.Helper()
	}
	s.Stop()
	if err := s.start(); err != nil {
		if s.t == nil {
			panic(fmt.Sprintf("redistest: restart %s: %v", s, err))
		}
		s.t.Fatalf("restart: %v", err)
	}
}

func (s *Server) String() string { return fmt.Sprintf("redis-server on %s", s.Addr()) }

// waitFor polls cond every 20 ms until it holds or d passes. Redis has no
// event for "the cluster agrees", so polling it is the only way.
func waitFor(ctx context.Context, d time.Duration, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}
