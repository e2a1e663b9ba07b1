package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"switchyard/store"
	"switchyard/store/storetest"
)

const defaultPGURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var pgBase struct {
	once sync.Once
	url  string
	err  error
}

// pgBaseURL finds a PostgreSQL the tests can use: SWITCHYARD_TEST_DATABASE_URL,
// or the local default (user postgres, else root, with trust auth). Without
// one the tests fail, because a skipped test proves nothing; set
// SWITCHYARD_TEST_SKIP_POSTGRES=1 to skip them knowingly.
func pgBaseURL(t *testing.T) string {
	t.Helper()
	if os.Getenv("SWITCHYARD_TEST_SKIP_POSTGRES") == "1" {
		t.Skip("SWITCHYARD_TEST_SKIP_POSTGRES=1")
	}
	pgBase.once.Do(func() {
		candidates := []string{os.Getenv("SWITCHYARD_TEST_DATABASE_URL")}
		if candidates[0] == "" {
			candidates = []string{defaultPGURL, strings.Replace(defaultPGURL, "postgres@", "root@", 1)}
		}
		for _, u := range candidates {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			conn, err := pgx.Connect(ctx, u)
			if err == nil {
				conn.Close(ctx)
				cancel()
				pgBase.url, pgBase.err = u, nil
				return
			}
			cancel()
			pgBase.err = err
		}
	})
	if pgBase.err != nil {
		t.Fatalf("PostgreSQL is unreachable (%v): start it, point SWITCHYARD_TEST_DATABASE_URL at one, "+
			"or set SWITCHYARD_TEST_SKIP_POSTGRES=1 to skip these tests", pgBase.err)
	}
	return pgBase.url
}

// pgSchemaURL creates a fresh schema for this test, dropped when it ends, and
// returns a URL whose connections use it (search_path as a startup
// parameter), so tests never see each other's rows.
func pgSchemaURL(t *testing.T) string {
	t.Helper()
	base := pgBaseURL(t)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "sytest_" + hex.EncodeToString(b)

	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})

	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func openPostgres(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(testCtx(t), store.Options{DatabaseURL: pgSchemaURL(t), Logger: quiet})
	if err != nil {
		t.Fatalf("Open PostgreSQL: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestPostgres(t *testing.T) {
	pgBaseURL(t) // fail (or skip) once, not in every subtest
	storetest.Run(t, openPostgres)
}

// The schemas really are separate: what one test writes, another cannot see.
func TestPostgresSchemasIsolated(t *testing.T) {
	ctx := testCtx(t)
	a, b := openPostgres(t), openPostgres(t)
	if _, _, err := a.CreateAccount(ctx, "only-in-a", "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AccountByName(ctx, "only-in-a"); err == nil {
		t.Error("an account created in one schema is visible in another")
	}
}

func TestOpenPostgresErrorSaysWhatToDo(t *testing.T) {
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	// Port 1 on localhost refuses at once.
	_, err := store.Open(ctx, store.Options{DatabaseURL: "postgres://sy:s3cr3t-pw@127.0.0.1:1/appdb?sslmode=disable&connect_timeout=2", Logger: quiet})
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	msg := err.Error()
	for _, want := range []string{"PostgreSQL", "127.0.0.1:1/appdb", "--database-url"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "s3cr3t-pw") {
		t.Errorf("error %q contains the password", msg)
	}

	_, err = store.Open(ctx, store.Options{DatabaseURL: "postgres://sy:s3cr3t-pw@host:notaport/db", Logger: quiet})
	if err == nil || strings.Contains(err.Error(), "s3cr3t-pw") || !strings.Contains(err.Error(), "--database-url") {
		t.Errorf("bad URL: %v; want an error naming --database-url without the password", err)
	}
}

func TestPostgresAmbiguousPrefix(t *testing.T) {
	dbURL := pgSchemaURL(t)
	st, err := store.Open(testCtx(t), store.Options{DatabaseURL: dbURL, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checkAmbiguousPrefix(t, st, func(accountID, prefix string) {
		ctx := testCtx(t)
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `INSERT INTO api_keys (id, account_id, hash, prefix, created_at) VALUES ('key_000000000dup', $1, 'planted', $2, now())`, accountID, prefix); err != nil {
			t.Fatal(err)
		}
	})
}
