package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"runtime"
	"strings"
)

// sqliteConn runs the store's statements on the embedded default: one file,
// WAL mode so that readers (Authenticate on every request) never wait for
// the batch writer.
type sqliteConn struct {
	sqlQuerier
	db *sql.DB
}

var _ conn = (*sqliteConn)(nil)

func openSQLite(ctx context.Context, opts Options) (*sqliteConn, error) {
	path, err := sqlitePath(opts.DataDir)
	if err != nil {
		return nil, err
	}
	db, err := openSQLiteDB(ctx, path)
	if err != nil {
		return nil, err
	}
	if _, err := migrateSQLite(ctx, db, path, opts.Logger); err != nil {
		db.Close()
		return nil, err
	}
	opts.Logger.Info("store opened", "dialect", "sqlite", "path", path)
	return &sqliteConn{sqlQuerier: sqlQuerier{db}, db: db}, nil
}

// openSQLiteDB opens the file with the settings every connection needs.
// busy_timeout makes a writer wait for the lock instead of failing at once;
// _txlock=immediate takes the write lock at BEGIN, because a transaction that
// reads first and upgrades later can fail with SQLITE_BUSY no timeout helps;
// _time_integer_format=unix_micro binds a time.Time as the INTEGER unix
// microseconds (UTC) the schema stores.
func openSQLiteDB(ctx context.Context, path string) (*sql.DB, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("store: SQLite path %q contains '?' or '#' (choose another --data-dir)", path)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)") // WAL + NORMAL: durable across process crashes, not power loss
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	q.Set("_time_integer_format", "unix_micro")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: cannot open SQLite database %s: %w (check --data-dir)", path, err)
	}
	// Writers queue on the file lock whatever the pool size; a bounded pool
	// keeps a burst of readers from opening a connection (and a page cache)
	// each.
	n := max(4, runtime.GOMAXPROCS(0))
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: cannot open SQLite database %s: %w (check that --data-dir is writable)", path, err)
	}
	return db, nil
}

func (c *sqliteConn) ping(ctx context.Context) error {
	if err := c.db.PingContext(ctx); err != nil {
		return fmt.Errorf("store: ping SQLite: %w", err)
	}
	return nil
}

func (c *sqliteConn) close() error { return c.db.Close() }

func (c *sqliteConn) inTx(ctx context.Context, fn func(querier) error) error {
	return c.sqlTx(ctx, func(tx *sql.Tx) error { return fn(sqlQuerier{tx}) })
}

func (c *sqliteConn) sqlTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (c *sqliteConn) execAll(ctx context.Context, q string, args [][]any) error {
	return c.inTx(ctx, func(tx querier) error {
		for _, a := range args {
			if _, err := tx.exec(ctx, q, a...); err != nil {
				return err
			}
		}
		return nil
	})
}

// sqlQuerier runs statements on the database or in a transaction.
type sqlQuerier struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (s sqlQuerier) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQuerier) queryRow(ctx context.Context, q string, args ...any) row {
	return s.q.QueryRowContext(ctx, q, args...)
}

func (s sqlQuerier) query(ctx context.Context, q string, args ...any) (rows, error) {
	rs, err := s.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rs}, nil
}

// sqlRows gives database/sql's rows the Close of pgx's, which returns
// nothing: what went wrong while reading is Err's.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

func (c *sqliteConn) writeTasks(ctx context.Context, recs []TaskRecord) error {
	// The transaction holds the file's write lock; the rows go one by one
	// through a statement prepared once. Its placeholders are anonymous (?):
	// the driver looks up a numbered one's name ($n) at every execution, an
	// allocation per parameter per row here (BenchmarkWriteTasks256: 7,457
	// allocations with ?, 12,064 with $n). The tasks it inserted, and only
	// those (a retried batch inserts nothing twice), are added to
	// usage_daily in the same transaction (their requests and content;
	// the tokens are writeUsage's).
	return c.sqlTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO tasks (id, account_id, key_id, task_type, stream, status, error_code,
			node_ids, requester_instance, owner_instance, attempts, created_at, assigned_at, finished_at,
			processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens, retries)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		var usage usageSums
		for _, r := range recs {
			r = cleanRecord(r)
			nodes, err := json.Marshal(nonNil(r.NodeIDs))
			if err != nil {
				return err
			}
			res, err := stmt.ExecContext(ctx, r.ID, r.AccountID, r.KeyID, r.TaskType, r.Stream, r.Status, r.ErrorCode,
				string(nodes), r.Requester, r.Owner, r.Attempts, dbTime(r.CreatedAt), optTime(dbTime(r.AssignedAt)), dbTime(r.FinishedAt),
				r.ProcessingMs, r.ContentBytes, r.ResultBytes, r.Usage.PromptTokens, r.Usage.CompletionTokens, encodeRetries(r.Retries))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				usage.add(r.AccountID, r.KeyID, r.TaskType, r.FinishedAt, recordTotals(r))
			}
		}
		return usage.write(ctx, tx)
	})
}

func (c *sqliteConn) writeUsage(ctx context.Context, reps []UsageReport) error {
	// As writeTasks: the reports it inserted, and only those, are added to
	// usage_daily in the same transaction.
	return c.sqlTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage_reports (task_id, node_id, account_id, key_id, task_type,
			reported_at, prompt_tokens, completion_tokens, node_ms, result_bytes)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (task_id, node_id) DO NOTHING`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		var usage usageSums
		for _, r := range reps {
			r = cleanReport(r)
			res, err := stmt.ExecContext(ctx, r.TaskID, r.NodeID, r.AccountID, r.KeyID, r.TaskType,
				dbTime(r.At), r.PromptTokens, r.CompletionTokens, r.NodeMs, r.ResultBytes)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				usage.add(r.AccountID, r.KeyID, r.TaskType, r.At, reportTotals(r))
			}
		}
		return usage.write(ctx, tx)
	})
}
