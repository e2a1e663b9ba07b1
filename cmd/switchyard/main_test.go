package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/store"
)

// serve, the node and the stores run goroutines; none may outlive a test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// keyRE is the shape of an API key: "gn_" and 32 lowercase hex characters.
var keyRE = regexp.MustCompile(`^gn_[0-9a-f]{32}$`)

// testCtx bounds a test, so that a hang fails it instead of the whole run.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// cli runs the command line args in-process and returns what it printed.
func cli(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = run(testCtx(t), args, &o, &e)
	return o.String(), e.String(), err
}

// mustCLI is cli for a command that must succeed.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, err := cli(t, args...)
	if err != nil {
		t.Fatalf("switchyard %q: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout, stderr)
	}
	return stdout
}

// lastLine is the last line of out, which must end with a newline.
func lastLine(t *testing.T, out string) string {
	t.Helper()
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("output does not end with a newline: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// wantErr fails unless err is an error whose text contains every one of want.
func wantErr(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one containing %q", what, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q lacks %q", what, err, w)
		}
	}
}

// outBuffer collects what a running command writes (from any goroutine) and
// lets a test wait for a line instead of sleeping.
type outBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed by the next Write; nil when nobody waits
}

func (o *outBuffer) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
	return o.b.Write(p)
}

func (o *outBuffer) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// waitLine returns the first complete line that match accepts, waiting for
// more output until ctx ends or quit is closed.
func (o *outBuffer) waitLine(ctx context.Context, quit <-chan struct{}, match func(string) bool) (string, error) {
	for {
		o.mu.Lock()
		text := o.b.String()
		if i := strings.LastIndexByte(text, '\n'); i >= 0 {
			for _, line := range strings.Split(text[:i], "\n") {
				if match(line) {
					o.mu.Unlock()
					return line, nil
				}
			}
		}
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		changed := o.changed
		o.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return "", ctx.Err()
		case <-quit:
			// It may have written the line just before it returned.
			select {
			case <-changed:
				continue
			default:
			}
			return "", errors.New("the command returned first")
		}
	}
}

// proc is a long-running command (serve, node) run in a goroutine.
type proc struct {
	args           []string
	stdout, stderr outBuffer
	cancel         context.CancelFunc
	exited         chan struct{} // closed when run has returned
	err            error         // run's error, once exited is closed
}

// startCLI runs args until stop (or the end of the test) cancels it.
func startCLI(t *testing.T, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{args: args, cancel: cancel, exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		p.err = run(ctx, args, &p.stdout, &p.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			t.Errorf("switchyard %q still runs 20s after it was cancelled", args)
		}
	})
	return p
}

// stop cancels the command and returns run's error; it fails the test if
// run does not return within a few seconds.
func (p *proc) stop(t *testing.T) error {
	t.Helper()
	p.cancel()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(10 * time.Second):
		t.Fatalf("switchyard %q did not return within 10s of its cancellation\nstderr:\n%s", p.args, p.stderr.String())
		return nil
	}
}

// waitLine waits for a line of stdout (or of stderr) that contains want.
func (p *proc) waitLine(t *testing.T, stderr bool, want string) string {
	t.Helper()
	out := &p.stdout
	if stderr {
		out = &p.stderr
	}
	line, err := out.waitLine(testCtx(t), p.exited, func(l string) bool { return strings.Contains(l, want) })
	if err != nil {
		select {
		case <-p.exited:
			t.Fatalf("switchyard %q returned %v before printing %q\nstdout:\n%s\nstderr:\n%s", p.args, p.err, want, p.stdout.String(), p.stderr.String())
		default:
		}
		t.Fatalf("waiting for %q from switchyard %q: %v\nstderr:\n%s", want, p.args, err, p.stderr.String())
	}
	return line
}

// A store backend is the flags that select it for every command.
type backend struct {
	name  string
	flags func(t *testing.T) []string
}

var backends = []backend{
	{"sqlite", func(t *testing.T) []string { return []string{"--data-dir", t.TempDir()} }},
	{"postgres", func(t *testing.T) []string { return []string{"--database-url", pgtest.SchemaURL(t, "clitest")} }},
}

// openFlags opens, as serve would, the store that flags select.
func openFlags(t *testing.T, flags []string) store.Store {
	t.Helper()
	opts := store.Options{Logger: quiet}
	for i := 0; i+1 < len(flags); i += 2 {
		switch flags[i] {
		case "--data-dir":
			opts.DataDir = flags[i+1]
		case "--database-url":
			opts.DatabaseURL = flags[i+1]
		}
	}
	st, err := store.Open(testCtx(t), opts)
	if err != nil {
		t.Fatalf("store.Open(%v): %v", flags, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestHelp(t *testing.T) {
	// Asking for help must not touch a store: run where ./data would appear.
	dir := t.TempDir()
	t.Chdir(dir)

	for _, args := range [][]string{{"help"}, {"--help"}, {"-help"}, {"-h"}} {
		stdout, _, err := cli(t, args...)
		if err != nil {
			t.Errorf("switchyard %q: %v", args, err)
		}
		for _, want := range []string{"switchyard accounts create", "switchyard keys create|list|revoke", "SWITCHYARD_DATABASE_URL"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("switchyard %q lacks %q:\n%s", args, want, stdout)
			}
		}
	}

	for _, tc := range []struct {
		args []string
		want []string // in the help text (flag prints it on stderr)
	}{
		{[]string{"serve", "--help"}, []string{"--database-url", "SWITCHYARD_DATABASE_URL", "SWITCHYARD_LISTEN (default :8800)", "SWITCHYARD_STREAM_MAX"}},
		{[]string{"node", "--help"}, []string{"SWITCHYARD_API_KEY", "SWITCHYARD_CAPABILITY", "SWITCHYARD_URL"}},
		{[]string{"accounts", "create", "--help"}, []string{"SWITCHYARD_NAME", "SWITCHYARD_TRUST", "SWITCHYARD_DATA_DIR", "SWITCHYARD_DATABASE_URL"}},
		{[]string{"accounts", "--help"}, []string{"SWITCHYARD_NAME", "SWITCHYARD_DATABASE_URL"}},
		{[]string{"keys", "create", "--help"}, []string{"SWITCHYARD_ACCOUNT", "SWITCHYARD_DATABASE_URL"}},
		{[]string{"keys", "list", "-h"}, []string{"SWITCHYARD_ACCOUNT", "SWITCHYARD_DATA_DIR"}},
		{[]string{"keys", "revoke", "--help"}, []string{"SWITCHYARD_DATABASE_URL"}},
		{[]string{"keys", "--help"}, []string{"create|list|revoke", "SWITCHYARD_ACCOUNT", "SWITCHYARD_DATABASE_URL"}},
		{[]string{"migrate", "--help"}, []string{"SWITCHYARD_DATA_DIR", "SWITCHYARD_DATABASE_URL"}},
		{[]string{"status", "--help"}, []string{"SWITCHYARD_URL (default http://127.0.0.1:8800)", "SWITCHYARD_JSON"}},
	} {
		stdout, stderr, err := cli(t, tc.args...)
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			t.Errorf("switchyard %q: %v", tc.args, err)
		}
		for _, want := range tc.want {
			if !strings.Contains(stdout+stderr, want) {
				t.Errorf("switchyard %q lacks %q:\n%s%s", tc.args, want, stdout, stderr)
			}
		}
	}

	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("asking for help left %d files in the working directory (%v); it must not open a store", len(entries), err)
	}
}

func TestUnknownCommand(t *testing.T) {
	stdout, stderr, err := cli(t, "frobnicate", "--now")
	wantErr(t, "switchyard frobnicate", err, `unknown command "frobnicate"`)
	if !strings.Contains(stderr, "Usage:") || !strings.Contains(stderr, "switchyard migrate") {
		t.Errorf("an unknown command does not print the usage on stderr:\n%s", stderr)
	}
	if stdout != "" {
		t.Errorf("an unknown command printed %q on stdout", stdout)
	}
}

func TestVersion(t *testing.T) {
	if out := mustCLI(t, "version"); out != version+"\n" {
		t.Errorf("switchyard version = %q, want %q", out, version+"\n")
	}
}
