package store_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/store/storetest"
)

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(testCtx(t), store.Options{DataDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatalf("Open SQLite: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestSQLite(t *testing.T) {
	storetest.Run(t, openSQLite)
}

// The default store must work with no configuration: the data directory is
// created (private), the file is in WAL mode, and data survives a reopen.
func TestSQLiteFileAndReopen(t *testing.T) {
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "nested", "data")
	opts := store.Options{DataDir: dir, Logger: quiet}
	st, err := store.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %v, want 0700", fi.Mode().Perm())
	}
	a, key, err := st.CreateAccount(ctx, "persist", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteTasks(ctx, []store.TaskRecord{{ID: "t1", AccountID: a.ID, Status: store.StatusCompleted, FinishedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	// WAL mode is a property of the file, so it is visible in the header:
	// bytes 18 and 19 are 2 for WAL.
	hdr := make([]byte, 20)
	f, err := os.Open(filepath.Join(dir, "switchyard.db"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(hdr, 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if hdr[18] != 2 || hdr[19] != 2 {
		t.Errorf("database file is not in WAL mode (header bytes 18,19 = %d,%d)", hdr[18], hdr[19])
	}

	st, err = store.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got, err := st.Authenticate(ctx, key); err != nil || got.ID != a.ID {
		t.Errorf("after reopen: Authenticate = %v, %v", got.ID, err)
	}
	if _, err := st.Task(ctx, "t1"); err != nil {
		t.Errorf("after reopen: Task: %v", err)
	}
}

func TestOpenRefusesUnknownScheme(t *testing.T) {
	_, err := store.Open(testCtx(t), store.Options{DatabaseURL: "mysql://root:hunter2@db/x", Logger: quiet})
	if err == nil {
		t.Fatal("Open accepted a mysql:// URL")
	}
	msg := err.Error()
	if strings.Contains(msg, "hunter2") || !strings.Contains(msg, `"mysql"`) || !strings.Contains(msg, "--database-url") {
		t.Errorf("error %q should name the scheme and the flag, and never the password", msg)
	}
}

func TestOpenSQLiteUnwritableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(testCtx(t), store.Options{DataDir: filepath.Join(file, "data"), Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("Open under a regular file: %v, want an error that points at --data-dir", err)
	}
}

// checkAmbiguousPrefix plants a second key with the same prefix (32 bits, so
// it happens) and checks RevokeKey refuses to guess between them.
func checkAmbiguousPrefix(t *testing.T, st store.Store, plant func(accountID, prefix string)) {
	t.Helper()
	ctx := testCtx(t)
	a, key, err := st.CreateAccount(ctx, "twins", "", "")
	if err != nil {
		t.Fatal(err)
	}
	plant(a.ID, key[:11])
	if err := st.RevokeKey(ctx, key[:11]); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("RevokeKey(shared prefix) = %v, want ErrConflict", err)
	}
	if _, err := st.Authenticate(ctx, key); err != nil {
		t.Errorf("a refused ambiguous revoke revoked the key anyway: %v", err)
	}
	if err := st.RevokeKey(ctx, key); err != nil {
		t.Errorf("RevokeKey(whole key) with a shared prefix: %v", err)
	}
	if _, err := st.Authenticate(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Authenticate after revoke = %v", err)
	}
}

func TestSQLiteAmbiguousPrefix(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(testCtx(t), store.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checkAmbiguousPrefix(t, st, func(accountID, prefix string) {
		db, err := sql.Open("sqlite", filepath.Join(dir, "switchyard.db")+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`INSERT INTO api_keys (id, account_id, hash, prefix, created_at) VALUES ('key_000000000dup', ?, 'planted', ?, 0)`, accountID, prefix); err != nil {
			t.Fatal(err)
		}
	})
}
