package store

import "context"

// sqlStore is the one implementation of Store (its AsyncQueue included) and
// WebhookStore, over either database: conn runs its statements (pgx's pool for
// PostgreSQL, database/sql for SQLite) and d holds what the two spell
// differently (dialect.go).
type sqlStore struct {
	db conn
	d  *dialect
}

var _ Store = (*sqlStore)(nil)

// conn is what the store needs of a database driver: pgConn (PostgreSQL,
// pgx's pool) and sqliteConn (SQLite, database/sql).
type conn interface {
	querier
	// inTx runs fn in a transaction, committed unless fn fails.
	inTx(ctx context.Context, fn func(tx querier) error) error
	// execAll runs q once for each set of arguments, in one transaction
	// (PostgreSQL sends them in one round trip).
	execAll(ctx context.Context, q string, args [][]any) error
	// writeTasks inserts task records, skipping ids already stored, in one
	// transaction: the batch writer's statement, on its hot path, written
	// for each database (postgres.go, sqlite.go).
	writeTasks(ctx context.Context, recs []TaskRecord) error
	// writeUsage inserts usage reports, skipping (task, node) pairs already
	// stored, and adds those it inserted to usage_daily, in one transaction.
	writeUsage(ctx context.Context, reps []UsageReport) error
	ping(ctx context.Context) error
	close() error
}

// querier runs statements on the database, or in a transaction.
type querier interface {
	// exec runs a statement and returns how many rows it changed.
	exec(ctx context.Context, q string, args ...any) (int64, error)
	// queryRow runs a query for one row; its Scan returns an error that
	// matches sql.ErrNoRows when there was none.
	queryRow(ctx context.Context, q string, args ...any) row
	query(ctx context.Context, q string, args ...any) (rows, error)
}

type row interface{ Scan(dest ...any) error }

type rows interface {
	row
	Next() bool
	Err() error
	Close()
}

// queryOne runs a query for one row and reads it with scan; the zero T
// with an error, one that matches sql.ErrNoRows when there was no row.
func queryOne[T any](ctx context.Context, q querier, scan func(row, *T) error, query string, args ...any) (T, error) {
	var v T
	if err := scan(q.queryRow(ctx, query, args...), &v); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// collect runs a query and returns its rows, each read by scan into one
// value, zeroed before each row.
func collect[T any](ctx context.Context, q querier, scan func(row, *T) error, query string, args ...any) ([]T, error) {
	rs, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []T
	var v, zero T
	for rs.Next() {
		v = zero
		if err := scan(rs, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rs.Err()
}

func (s *sqlStore) Ping(ctx context.Context) error { return s.db.ping(ctx) }

func (s *sqlStore) Close() error { return s.db.close() }
