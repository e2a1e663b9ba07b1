// Package pgtest gives each test its own PostgreSQL schema, so tests that
// share one database never see each other's rows.
package pgtest

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
)

// defaultURL is the local PostgreSQL scripts/test.sh provides (trust auth
// here; a password on a fresh install).
const defaultURL = "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"

var base struct {
	once sync.Once
	url  string
	err  error
}

// BaseURL finds the PostgreSQL the tests use: SWITCHYARD_TEST_DATABASE_URL,
// or the local default (user postgres, else root). Without one the test
// fails, because a skipped test proves nothing; SWITCHYARD_TEST_SKIP_POSTGRES=1
// skips knowingly.
func BaseURL(t testing.TB) string {
	t.Helper()
	if os.Getenv("SWITCHYARD_TEST_SKIP_POSTGRES") == "1" {
		t.Skip("SWITCHYARD_TEST_SKIP_POSTGRES=1")
	}
	base.once.Do(func() {
		candidates := []string{os.Getenv("SWITCHYARD_TEST_DATABASE_URL")}
		if candidates[0] == "" {
			candidates = []string{defaultURL, strings.Replace(defaultURL, "postgres:postgres@", "root@", 1)}
		}
		for _, u := range candidates {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			conn, err := pgx.Connect(ctx, u)
			if err == nil {
				_ = conn.Close(ctx)
				cancel()
				base.url, base.err = u, nil
				return
			}
			cancel()
			base.err = err
		}
	})
	if base.err != nil {
		t.Fatalf("PostgreSQL is unreachable (%v): start it (scripts/test.sh does), point SWITCHYARD_TEST_DATABASE_URL at one, "+
			"or set SWITCHYARD_TEST_SKIP_POSTGRES=1 to skip these tests", base.err)
	}
	return base.url
}

// SchemaURL creates a fresh schema named prefix_<random>, dropped when the
// test ends, and returns a URL whose connections use it (search_path as a
// startup parameter).
func SchemaURL(t testing.TB, prefix string) string {
	t.Helper()
	u, _ := Schema(t, prefix)
	return u
}

// Schema is SchemaURL that also returns the schema's name.
func Schema(t testing.TB, prefix string) (dbURL, schema string) {
	t.Helper()
	b := BaseURL(t)
	raw := make([]byte, 6)
	_, _ = rand.Read(raw)
	schema = prefix + "_" + hex.EncodeToString(raw)
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, b)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	if err := exec("CREATE SCHEMA " + quoted); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		if err := exec("DROP SCHEMA " + quoted + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}
