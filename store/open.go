package store

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Options select and configure the database. Zero values mean the defaults
// noted on each field; Open copies the struct and never changes the caller's.
type Options struct {
	// DataDir holds the SQLite file (switchyard.db). Default "./data";
	// created with mode 0700 when missing. Unused with PostgreSQL.
	DataDir string
	// DatabaseURL selects PostgreSQL when it is a postgres:// or
	// postgresql:// URL. Empty (the default) selects SQLite in DataDir.
	DatabaseURL string
	// Logger receives the few events worth an operator's attention (opened,
	// migrations applied). Default slog.Default().
	Logger *slog.Logger
	// Guard configures the deadlines and breaker every opened store is
	// wrapped in (see Guard). Its zero value means GuardConfig's defaults,
	// except that SQLite's per-call Timeout defaults to 5s: a local file
	// does not stall like a server, but its writers queue on one lock.
	Guard GuardConfig
}

// sqliteFile is the database's name inside DataDir.
const sqliteFile = "switchyard.db"

func (o Options) withDefaults() Options {
	if o.DataDir == "" {
		o.DataDir = "./data"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Logger = o.Logger.With("component", "store")
	if o.Guard.Logger == nil {
		o.Guard.Logger = o.Logger
	}
	return o
}

// isPostgres reports whether url selects PostgreSQL, and refuses any other
// non-empty scheme rather than guessing. Only the scheme is ever echoed: the
// rest of the URL may hold a password.
func isPostgres(url string) (bool, error) {
	switch {
	case url == "":
		return false, nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return true, nil
	}
	scheme, _, ok := strings.Cut(url, "://")
	if !ok {
		scheme = "(none)"
	}
	return false, fmt.Errorf("store: --database-url scheme %q is not supported: use postgres://user@host:port/db, or leave it empty for SQLite in --data-dir", scheme)
}

// Open opens the configured database, applies any pending migrations and
// returns it ready for use, wrapped in a Guard (every call has a deadline;
// a breaker turns a stalled database into fast ErrUnavailable). Several
// instances may Open one PostgreSQL database at the same time: migrations
// run under a session lock.
func Open(ctx context.Context, opts Options) (Store, error) {
	opts = opts.withDefaults()
	pg, err := isPostgres(opts.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if pg {
		c, err := openPostgres(ctx, opts)
		if err != nil {
			return nil, err
		}
		return NewGuard(&sqlStore{db: c, d: postgresDialect}, opts.Guard), nil
	}
	c, err := openSQLite(ctx, opts)
	if err != nil {
		return nil, err
	}
	if opts.Guard.Timeout <= 0 {
		opts.Guard.Timeout = 5 * time.Second
	}
	return NewGuard(&sqlStore{db: c, d: sqliteDialect}, opts.Guard), nil
}

// sqlitePath creates the data directory when needed and returns the file path.
func sqlitePath(dataDir string) (string, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("store: cannot create data directory %s: %w (check --data-dir)", dataDir, err)
	}
	return filepath.Join(dataDir, sqliteFile), nil
}
