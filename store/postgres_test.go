package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/store/storetest"
)

func openPostgres(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(testCtx(t), store.Options{DatabaseURL: pgtest.SchemaURL(t, "sytest"), Logger: quiet})
	if err != nil {
		t.Fatalf("Open PostgreSQL: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestPostgres(t *testing.T) {
	pgtest.BaseURL(t) // fail (or skip) once, not in every subtest
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
	dbURL := pgtest.SchemaURL(t, "sytest")
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
