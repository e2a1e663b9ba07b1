package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a private PostgreSQL server, for tests that must stop, stall or
// kill the database — never the shared one. It runs from a data directory
// in the test's temporary directory, on a free loopback port, and is shut
// down when the test ends.
type Server struct {
	// URL connects to its "postgres" database as the superuser postgres.
	URL string
	// Pid is the postmaster's process id (Stop and Cont signal it and its
	// children).
	Pid int

	t       testing.TB
	done    chan struct{}
	logPath string
}

// StartServer initialises and starts a private server (initdb and postgres
// from /usr/lib/postgresql/*/bin, the newest version there). As root it runs
// them as the OS user postgres, which must own the data directory. It fails
// the test when PostgreSQL is not installed, unless
// SWITCHYARD_TEST_SKIP_POSTGRES=1.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return startServer(t, func() int { return freePort(t) })
}

// startServer is StartServer drawing each port it tries from ports.
func startServer(t testing.TB, ports func() int) *Server {
	t.Helper()
	if os.Getenv("SWITCHYARD_TEST_SKIP_POSTGRES") == "1" {
		t.Skip("SWITCHYARD_TEST_SKIP_POSTGRES=1")
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		t.Fatal("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (install postgresql, or set SWITCHYARD_TEST_SKIP_POSTGRES=1)")
	}
	sort.Slice(bins, func(i, j int) bool { return version(bins[i]) < version(bins[j]) })
	bin := filepath.Dir(bins[len(bins)-1])

	base := t.TempDir()
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL must run as the OS user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The server's user must reach the data directory through the
		// test's temporary directories (created 0700 for root).
		for d := base; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	data := filepath.Join(base, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(data, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}

	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"--no-sync", "-E", "UTF8", "--locale=C")
	initdb.Dir = base
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	s := &Server{t: t, logPath: filepath.Join(base, "postgres.log")}
	t.Cleanup(s.Close)
	for attempt := 1; ; attempt++ {
		err := s.start(bin, base, data, cred, ports())
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			t.Fatalf("%v\n%s", err, s.serverLog())
		}
	}
}

// startAttempts bounds the ports a start tries: a port free when it was
// drawn may be taken before postgres binds it (by a client connection's
// local port, or by another test's server).
const startAttempts = 5

var errPortTaken = errors.New("port taken")

// start runs postgres on data and port and waits until it answers. The
// server that answers must be this one (its data_directory is data): on a
// port someone else's PostgreSQL holds, a connection succeeds while this
// one exits, unable to bind. That exit is errPortTaken.
func (s *Server) start(bin, dir, data string, cred *syscall.Credential, port int) error {
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	logf, err := os.Create(s.logPath)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-k", data, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=50")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	s.Pid, s.done = cmd.Process.Pid, done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()

	deadline := time.Now().Add(30 * time.Second)
	for {
		answered, err := dataDirectory(s.URL)
		if err == nil && answered == data {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("port %d answers for another server (data directory %s)", port, answered)
		}
		select {
		case <-done:
			if strings.Contains(s.serverLog(), "could not bind") {
				return fmt.Errorf("%w: postgres could not bind port %d", errPortTaken, port)
			}
			return errors.New("postgres exited at start")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dataDirectory asks the server at url for its data directory.
func dataDirectory(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var dir string
	err = conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir)
	return dir, err
}

// Stop freezes the server and all its backends with SIGSTOP: connections
// stay open, and nothing answers — the stalled database of a hung host. The
// postmaster is stopped first, so that it forks nothing meanwhile; each
// backend leads a process group of its own (PostgreSQL calls setsid), so
// they are found as the postmaster's children.
func (s *Server) Stop() {
	s.t.Helper()
	s.signal(s.Pid, syscall.SIGSTOP)
	for _, pid := range s.children() {
		s.signal(pid, syscall.SIGSTOP)
	}
}

// Cont lets a stopped server run again (SIGCONT).
func (s *Server) Cont() {
	s.t.Helper()
	for _, pid := range s.children() {
		s.signal(pid, syscall.SIGCONT)
	}
	s.signal(s.Pid, syscall.SIGCONT)
}

func (s *Server) signal(pid int, sig syscall.Signal) {
	s.t.Helper()
	if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
		s.t.Fatalf("signal %v to postgres pid %d: %v", sig, pid, err)
	}
}

// children lists the postmaster's child processes from /proc.
func (s *Server) children() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(s.Pid) {
			out = append(out, pid)
		}
	}
	return out
}

// Close stops the server fast (SIGINT after SIGCONT), and kills it if it
// does not exit in time: from then on connections are refused. The test's
// cleanup calls it; calling it again does nothing.
func (s *Server) Close() {
	if s.done == nil {
		return // never started
	}
	select {
	case <-s.done:
		return
	default:
	}
	for _, pid := range s.children() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	_ = syscall.Kill(s.Pid, syscall.SIGCONT)
	_ = syscall.Kill(s.Pid, syscall.SIGINT)
	select {
	case <-s.done:
		return
	case <-time.After(15 * time.Second):
	}
	for _, pid := range s.children() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(s.Pid, syscall.SIGKILL)
	<-s.done
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// version is the major version in /usr/lib/postgresql/<major>/bin/postgres.
func version(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bin))))
	return n
}

func (s *Server) serverLog() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}
