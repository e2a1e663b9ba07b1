package clustertest

import (
	"strings"
	"testing"
	"time"
)

// The rollback switch (the modes in docs/OPERATIONS.md): with --multi-instance=false and a Redis
// URL, an instance takes the single-instance lock. A second one on the same
// Redis and namespace refuses to start and names the holder; once the
// first has drained (SIGTERM releases the lock), a third starts.
func TestSecondInstanceInLockModeIsRefused(t *testing.T) {
	c := New(t, Config{NoPostgres: true}) // SQLite, each in its own data directory
	first := c.Start("lock-first", "--multi-instance=false")
	if st := first.Status(); st.Mode != "single (Redis lock)" || st.Store != "sqlite" {
		t.Fatalf("first instance's status: %+v, want mode \"single (Redis lock)\" and store sqlite", st)
	}

	second := c.Launch("lock-second", "--multi-instance=false")
	if code := second.WaitExit(15 * time.Second); code == 0 {
		t.Fatalf("the second instance exited 0; want a refusal. Its output:\n%s", second.Stderr())
	}
	if out := second.Stderr(); !strings.Contains(out, "lock-first") || !strings.Contains(out, "lock") {
		t.Fatalf("the second instance's refusal does not name the holder (lock-first):\n%s", out)
	}

	t.Logf("refusal: %s", lastLine(second.Stderr()))
	first.Terminate()
	if code := first.WaitExit(15 * time.Second); code != 0 {
		t.Fatalf("the first instance exited %d after SIGTERM, want 0", code)
	}
	third := c.Start("lock-third", "--multi-instance=false")
	if st := third.Status(); st.Mode != "single (Redis lock)" || !st.Ready {
		t.Fatalf("third instance's status: %+v", st)
	}
	// The lock is the third's now.
	fourth := c.Launch("lock-fourth", "--multi-instance=false")
	if code := fourth.WaitExit(15 * time.Second); code == 0 || !strings.Contains(fourth.Stderr(), "lock-third") {
		t.Fatalf("a fourth instance exited %d; want a refusal naming lock-third. Its output:\n%s", code, fourth.Stderr())
	}
}

// Multi-instance mode (the default with a Redis URL) needs
// PostgreSQL. Without --database-url, serve refuses to start with one clear
// sentence that names the flag.
func TestMultiInstanceRequiresPostgres(t *testing.T) {
	c := New(t, Config{NoPostgres: true})
	i := c.Launch("no-postgres")
	if code := i.WaitExit(15 * time.Second); code == 0 {
		t.Fatalf("serve --redis-url without --database-url exited 0. Its output:\n%s", i.Stderr())
	}
	out := strings.TrimSpace(i.Stderr())
	if lines := strings.Split(out, "\n"); len(lines) != 1 || !strings.Contains(out, "--database-url") {
		t.Fatalf("serve --redis-url without --database-url said (%d lines):\n%s\nwant one line that names --database-url", len(lines), out)
	}
	t.Logf("refusal: %s", out)
}

// lastLine is the last non-empty line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
