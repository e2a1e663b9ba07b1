package store_test

import (
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/migrations"
	"github.com/switchyard-dev/switchyard/store"
)

var wantApplied = []string{"00001_init.sql", "00002_benchmarks.sql", "00003_async_tasks.sql", "00004_webhooks.sql", "00005_auth_changes.sql", "00006_usage.sql", "00007_usage_reports.sql",
	"00008_dead_letters.sql", "00009_task_retries.sql"}

func checkMigrateTwice(t *testing.T, opts store.Options) {
	t.Helper()
	ctx := testCtx(t)
	applied, err := store.Migrate(ctx, opts)
	if err != nil {
		t.Fatalf("first Migrate: %v", err)
	}
	if !slices.Equal(applied, wantApplied) {
		t.Errorf("first Migrate applied %v, want %v", applied, wantApplied)
	}
	applied, err = store.Migrate(ctx, opts)
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if len(applied) != 0 {
		t.Errorf("second Migrate applied %v, want nothing", applied)
	}
	// Open finds the schema current and works on it.
	st, err := store.Open(ctx, opts)
	if err != nil {
		t.Fatalf("Open after Migrate: %v", err)
	}
	defer st.Close()
	if _, _, err := st.CreateAccount(ctx, "after-migrate", "", ""); err != nil {
		t.Errorf("CreateAccount after Migrate: %v", err)
	}
}

func TestMigrateSQLiteTwice(t *testing.T) {
	checkMigrateTwice(t, store.Options{DataDir: t.TempDir(), Logger: quiet})
}

func TestMigratePostgresTwice(t *testing.T) {
	checkMigrateTwice(t, store.Options{DatabaseURL: pgtest.SchemaURL(t, "sytest"), Logger: quiet})
}

// Instances booting together all migrate at once; the session lock makes
// one of them apply the migrations and the others find nothing to do. Two
// cases: a fresh schema, and the upgrade case, where goose's version table
// exists and a migration is pending (a rolling upgrade). The second is the
// sharper test: on a fresh schema goose's own retry around creating its
// table happens to serialise the instances even without the lock.
func TestMigratePostgresConcurrent(t *testing.T) {
	t.Run("fresh", func(t *testing.T) {
		checkConcurrentMigrate(t, pgtest.SchemaURL(t, "sytest"))
	})
	t.Run("upgrade", func(t *testing.T) {
		ctx := testCtx(t)
		dbURL := pgtest.SchemaURL(t, "sytest")
		if _, err := store.Migrate(ctx, store.Options{DatabaseURL: dbURL, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		cfg, err := pgx.ParseConfig(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		db := stdlib.OpenDB(*cfg)
		defer db.Close()
		p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.Postgres(), goose.WithDisableGlobalRegistry(true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.DownTo(ctx, 0); err != nil {
			t.Fatal(err)
		}
		checkConcurrentMigrate(t, dbURL)
	})
}

func checkConcurrentMigrate(t *testing.T, dbURL string) {
	ctx := testCtx(t)
	opts := store.Options{DatabaseURL: dbURL, Logger: quiet}
	const n = 3
	results := make([][]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = store.Migrate(ctx, opts)
		})
	}
	close(start)
	wg.Wait()
	var applied []string
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Migrate %d: %v", i, errs[i])
		}
		applied = append(applied, results[i]...)
	}
	if !slices.Equal(applied, wantApplied) {
		t.Errorf("together the three applied %v, want %v exactly once", applied, wantApplied)
	}

	// Everything landed in the test's schema, goose's bookkeeping included.
	u, _ := url.Parse(dbURL)
	schema := u.Query().Get("search_path")
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename`, schema)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"accounts", "api_keys", "async_tasks", "auth_changes", "benchmarks", "dead_letters", "goose_db_version", "node_stats", "ratings", "tasks", "usage_daily", "usage_reports", "webhook_deliveries", "webhook_secrets"}
	if !slices.Equal(tables, want) {
		t.Errorf("tables in %s: %v, want %v", schema, tables, want)
	}
}
