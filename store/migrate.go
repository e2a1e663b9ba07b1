package store

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/switchyard-dev/switchyard/migrations"
)

// Migrate applies pending migrations to the configured database and returns
// the names of the files it applied (none when the schema is current). It is
// what `switchyard migrate` runs; Open does the same on its own.
func Migrate(ctx context.Context, opts Options) (applied []string, err error) {
	opts = opts.withDefaults()
	pg, err := isPostgres(opts.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if pg {
		cfg, where, err := parsePostgres(opts.DatabaseURL)
		if err != nil {
			return nil, err
		}
		return migratePostgres(ctx, cfg.ConnConfig, where, opts.Logger)
	}
	path, err := sqlitePath(opts.DataDir)
	if err != nil {
		return nil, err
	}
	db, err := openSQLiteDB(ctx, path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return migrateSQLite(ctx, db, path, opts.Logger)
}

func migrateSQLite(ctx context.Context, db *sql.DB, path string, log *slog.Logger) ([]string, error) {
	applied, err := runGoose(ctx, goose.DialectSQLite3, db, migrations.SQLite(), log)
	if err != nil {
		return nil, fmt.Errorf("store: migrate SQLite database %s: %w", path, err)
	}
	return applied, nil
}

// migratePostgres runs the migrations over a database/sql connection of its
// own (goose speaks database/sql, the store speaks pgxpool). Closing it at
// the end also ends the session, so a lock can never outlive a failed run.
func migratePostgres(ctx context.Context, cc *pgx.ConnConfig, where string, log *slog.Logger) ([]string, error) {
	db := stdlib.OpenDB(*cc)
	defer db.Close()

	// The advisory lock is keyed by database and schema: instances that share
	// a schema take turns, while deployments in other schemas of the same
	// database (and parallel tests) do not wait for each other.
	var scope string
	if err := db.QueryRowContext(ctx, `SELECT current_database() || '.' || coalesce(current_schema(), '')`).Scan(&scope); err != nil {
		return nil, fmt.Errorf("store: cannot reach PostgreSQL at %s to migrate: %w (check --database-url)", where, err)
	}
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(lockID(scope)),
		lock.WithLockTimeout(1, 300), // wait up to 5 minutes for another instance's migration
		lock.WithUnlockTimeout(1, 10),
	)
	if err != nil {
		return nil, fmt.Errorf("store: migration lock: %w", err)
	}
	applied, err := runGoose(ctx, goose.DialectPostgres, db, migrations.Postgres(), log, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("store: migrate PostgreSQL at %s: %w", where, err)
	}
	return applied, nil
}

// lockID maps a database.schema name to an advisory lock key. goose's own
// default key is shared by every goose user of the database; ours is not.
func lockID(scope string) int64 {
	h := fnv.New64a()
	h.Write([]byte("switchyard migrations " + scope))
	return int64(h.Sum64())
}

func runGoose(ctx context.Context, dialect goose.Dialect, db *sql.DB, fsys fs.FS, log *slog.Logger, extra ...goose.ProviderOption) ([]string, error) {
	opts := append([]goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true), // only our embedded files, whatever else links goose
		goose.WithSlog(log),
	}, extra...)
	p, err := goose.NewProvider(dialect, db, fsys, opts...)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, err
	}
	applied := make([]string, 0, len(results))
	for _, r := range results {
		applied = append(applied, filepath.Base(r.Source.Path))
	}
	if len(applied) > 0 {
		log.Info("migrations applied", "migrations", applied)
	}
	return applied, nil
}
