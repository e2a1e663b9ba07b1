package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteStore is the embedded default: one file, WAL mode so that readers
// (Authenticate on every request) never wait for the batch writer.
type sqliteStore struct {
	db  *sql.DB
	log *slog.Logger
}

var _ Store = (*sqliteStore)(nil)

func openSQLite(ctx context.Context, opts Options) (Store, error) {
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
	return &sqliteStore{db: db, log: opts.Logger}, nil
}

// openSQLiteDB opens the file with the settings every connection needs.
// busy_timeout makes a writer wait for the lock instead of failing at once;
// _txlock=immediate takes the write lock at BEGIN, because a transaction that
// reads first and upgrades later can fail with SQLITE_BUSY no timeout helps.
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

func (s *sqliteStore) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("store: ping SQLite: %w", err)
	}
	return nil
}

func (s *sqliteStore) Close() error { return s.db.Close() }

// inTx runs fn in a transaction and commits it unless fn fails.
func (s *sqliteStore) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func isSQLiteUnique(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && (e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

func micro(t time.Time) int64 { return dbTime(t).UnixMicro() }

func fromMicro(v int64) time.Time { return time.UnixMicro(v).UTC() }

func fromNullMicro(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	return timePtr(fromMicro(v.Int64))
}

// --- accounts ---

const sqliteAccountCols = `id, name, email, trust, created_at`

func scanSQLiteAccount(row interface{ Scan(...any) error }) (Account, error) {
	var a Account
	var created int64
	if err := row.Scan(&a.ID, &a.Name, &a.Email, &a.Trust, &created); err != nil {
		return Account{}, err
	}
	a.CreatedAt = fromMicro(created)
	return a, nil
}

func (s *sqliteStore) CreateAccount(ctx context.Context, name, email, trust string) (Account, string, error) {
	trust, err := checkAccount(name, email, trust)
	if err != nil {
		return Account{}, "", err
	}
	a := Account{ID: newAccountID(), Name: name, Email: email, Trust: trust, CreatedAt: dbTime(time.Now())}
	var key string
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, name, email, trust, created_at) VALUES (?, ?, ?, ?, ?)`,
			a.ID, a.Name, a.Email, a.Trust, micro(a.CreatedAt))
		if isSQLiteUnique(err) {
			return fmt.Errorf("store: account name %q is taken: %w", name, ErrConflict)
		}
		if err != nil {
			return err
		}
		_, key, err = s.insertKey(ctx, tx, a.ID)
		return err
	})
	if err != nil {
		return Account{}, "", wrapErr("create account", err)
	}
	return a, key, nil
}

func (s *sqliteStore) Account(ctx context.Context, id string) (Account, error) {
	a, err := scanSQLiteAccount(s.db.QueryRowContext(ctx,
		`SELECT `+sqliteAccountCols+` FROM accounts WHERE id = ? AND deleted_at IS NULL`, id))
	return a, notFound(err, "account %s", id)
}

func (s *sqliteStore) AccountByName(ctx context.Context, name string) (Account, error) {
	a, err := scanSQLiteAccount(s.db.QueryRowContext(ctx,
		`SELECT `+sqliteAccountCols+` FROM accounts WHERE name = ? AND deleted_at IS NULL`, name))
	return a, notFound(err, "account named %q", name)
}

func (s *sqliteStore) DeleteAccount(ctx context.Context, id string) error {
	now := micro(time.Now())
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE accounts SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL`, now, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("store: account %s: %w", id, ErrNotFound)
		}
		_, err = tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE account_id = ? AND revoked_at IS NULL`, now, id)
		return err
	})
	return wrapErr("delete account", err)
}

// --- keys ---

// insertKey adds a key for an account the caller has checked exists.
func (s *sqliteStore) insertKey(ctx context.Context, tx *sql.Tx, accountID string) (APIKey, string, error) {
	key, hash, prefix, err := newKey()
	if err != nil {
		return APIKey{}, "", err
	}
	id, err := newKeyID()
	if err != nil {
		return APIKey{}, "", err
	}
	k := APIKey{ID: id, AccountID: accountID, Prefix: prefix, CreatedAt: dbTime(time.Now())}
	_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, account_id, hash, prefix, created_at) VALUES (?, ?, ?, ?, ?)`,
		k.ID, k.AccountID, hash, k.Prefix, micro(k.CreatedAt))
	if err != nil {
		return APIKey{}, "", err
	}
	return k, key, nil
}

func (s *sqliteStore) CreateKey(ctx context.Context, accountID string) (APIKey, string, error) {
	var k APIKey
	var key string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM accounts WHERE id = ? AND deleted_at IS NULL`, accountID).Scan(&one)
		if err := notFound(err, "account %s", accountID); err != nil {
			return err
		}
		k, key, err = s.insertKey(ctx, tx, accountID)
		return err
	})
	if err != nil {
		return APIKey{}, "", wrapErr("create key", err)
	}
	return k, key, nil
}

func (s *sqliteStore) ListKeys(ctx context.Context, accountID string) ([]APIKey, error) {
	q := `SELECT k.id, k.account_id, k.prefix, k.created_at, k.revoked_at
		FROM api_keys k JOIN accounts a ON a.id = k.account_id
		WHERE a.deleted_at IS NULL`
	var args []any
	if accountID != "" {
		if _, err := s.Account(ctx, accountID); err != nil {
			return nil, err
		}
		q += ` AND k.account_id = ?`
		args = append(args, accountID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY k.created_at, k.id`, args...)
	if err != nil {
		return nil, wrapErr("list keys", err)
	}
	defer rows.Close()
	keys := []APIKey{}
	for rows.Next() {
		var k APIKey
		var created int64
		var revoked sql.NullInt64
		if err := rows.Scan(&k.ID, &k.AccountID, &k.Prefix, &created, &revoked); err != nil {
			return nil, wrapErr("list keys", err)
		}
		k.CreatedAt, k.RevokedAt = fromMicro(created), fromNullMicro(revoked)
		keys = append(keys, k)
	}
	return keys, wrapErr("list keys", rows.Err())
}

func (s *sqliteStore) RevokeKey(ctx context.Context, idOrPrefix string) error {
	if idOrPrefix == "" {
		return fmt.Errorf("store: revoke key: no key id or prefix given: %w", ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM api_keys WHERE id = ? OR prefix = ? OR hash = ?`,
			idOrPrefix, idOrPrefix, revokeHash(idOrPrefix))
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := oneKey(idOrPrefix, ids); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, micro(time.Now()), ids[0])
		return err
	})
	return wrapErr("revoke key", err)
}

func (s *sqliteStore) Authenticate(ctx context.Context, key string) (Account, error) {
	if !looksLikeKey(key) {
		return Account{}, fmt.Errorf("store: unknown API key: %w", ErrNotFound)
	}
	a, err := scanSQLiteAccount(s.db.QueryRowContext(ctx, `SELECT a.id, a.name, a.email, a.trust, a.created_at
		FROM api_keys k JOIN accounts a ON a.id = k.account_id
		WHERE k.hash = ? AND k.revoked_at IS NULL AND a.deleted_at IS NULL`, hashKey(key)))
	return a, notFound(err, "API key")
}

// --- tasks ---

func (s *sqliteStore) WriteTasks(ctx context.Context, recs []TaskRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if err := checkTasks(recs); err != nil {
		return err
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO tasks (id, account_id, task_type, stream, status, error_code,
			node_ids, requester_instance, owner_instance, attempts, created_at, assigned_at, finished_at,
			processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, r := range recs {
			r = cleanRecord(r)
			nodes, err := json.Marshal(nonNil(r.NodeIDs))
			if err != nil {
				return err
			}
			var assigned sql.NullInt64
			if !r.AssignedAt.IsZero() {
				assigned = sql.NullInt64{Int64: micro(r.AssignedAt), Valid: true}
			}
			if _, err := stmt.ExecContext(ctx, r.ID, r.AccountID, r.TaskType, r.Stream, r.Status, r.ErrorCode,
				string(nodes), r.Requester, r.Owner, r.Attempts, micro(r.CreatedAt), assigned, micro(r.FinishedAt),
				r.ProcessingMs, r.ContentBytes, r.ResultBytes, r.Usage.PromptTokens, r.Usage.CompletionTokens); err != nil {
				return err
			}
		}
		return nil
	})
	return wrapErr("write tasks", err)
}

func (s *sqliteStore) Task(ctx context.Context, id string) (TaskRecord, error) {
	r, err := s.task(ctx, s.db, id)
	return r, notFound(err, "task %s", id)
}

func (s *sqliteStore) task(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id string) (TaskRecord, error) {
	var r TaskRecord
	var nodes string
	var created, finished int64
	var assigned sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT id, account_id, task_type, stream, status, error_code, node_ids,
		requester_instance, owner_instance, attempts, created_at, assigned_at, finished_at,
		processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens
		FROM tasks WHERE id = ?`, id).Scan(&r.ID, &r.AccountID, &r.TaskType, &r.Stream, &r.Status, &r.ErrorCode, &nodes,
		&r.Requester, &r.Owner, &r.Attempts, &created, &assigned, &finished,
		&r.ProcessingMs, &r.ContentBytes, &r.ResultBytes, &r.Usage.PromptTokens, &r.Usage.CompletionTokens)
	if err != nil {
		return TaskRecord{}, err
	}
	if err := json.Unmarshal([]byte(nodes), &r.NodeIDs); err != nil {
		return TaskRecord{}, fmt.Errorf("task %s: node_ids: %w", id, err)
	}
	r.NodeIDs = nonNil(r.NodeIDs)
	r.CreatedAt, r.FinishedAt = fromMicro(created), fromMicro(finished)
	if assigned.Valid {
		r.AssignedAt = fromMicro(assigned.Int64)
	}
	return r, nil
}

func (s *sqliteStore) CountCompletedSince(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE status = ? AND finished_at >= ?`,
		StatusCompleted, micro(t)).Scan(&n)
	return n, wrapErr("count tasks", err)
}

// --- nodes ---

func (s *sqliteStore) RecordNode(ctx context.Context, nodeID, accountID, name string) error {
	if nodeID == "" {
		return fmt.Errorf("store: record node: empty node id: %w", ErrInvalid)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO node_stats (node_id, account_id, name) VALUES (?, ?, ?)
		ON CONFLICT (node_id) DO UPDATE SET account_id = excluded.account_id, name = excluded.name`,
		nodeID, accountID, cleanText(name))
	return wrapErr("record node", err)
}

func (s *sqliteStore) SaveBenchmark(ctx context.Context, nodeID string, profile []byte, at time.Time) error {
	if nodeID == "" || !json.Valid(profile) {
		return fmt.Errorf("store: save benchmark: empty node id or invalid JSON: %w", ErrInvalid)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO benchmarks (node_id, profile, measured_at) VALUES (?, ?, ?)
		ON CONFLICT (node_id) DO UPDATE SET profile = excluded.profile, measured_at = excluded.measured_at`,
		nodeID, string(profile), micro(at))
	return wrapErr("save benchmark", err)
}

func (s *sqliteStore) Benchmark(ctx context.Context, nodeID string) ([]byte, time.Time, error) {
	var profile string
	var at int64
	err := s.db.QueryRowContext(ctx, `SELECT profile, measured_at FROM benchmarks WHERE node_id = ?`, nodeID).Scan(&profile, &at)
	if err != nil {
		return nil, time.Time{}, notFound(err, "benchmark of %s", nodeID)
	}
	return []byte(profile), fromMicro(at), nil
}

func (s *sqliteStore) ApplyOutcomes(ctx context.Context, outs []Outcome) error {
	if len(outs) == 0 {
		return nil
	}
	if err := checkOutcomes(outs); err != nil {
		return err
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, d := range aggregateOutcomes(outs) {
			var last sql.NullInt64
			if !d.LastAt.IsZero() {
				last = sql.NullInt64{Int64: micro(d.LastAt), Valid: true}
			}
			// max() of SQLite returns NULL if any argument is NULL, hence
			// the coalesce on both sides.
			if _, err := tx.ExecContext(ctx, `INSERT INTO node_stats (node_id, total_tasks, successful_tasks, total_ms, last_task_at)
				VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (node_id) DO UPDATE SET
					total_tasks = total_tasks + excluded.total_tasks,
					successful_tasks = successful_tasks + excluded.successful_tasks,
					total_ms = total_ms + excluded.total_ms,
					last_task_at = max(coalesce(last_task_at, excluded.last_task_at), coalesce(excluded.last_task_at, last_task_at))`,
				d.NodeID, d.Tasks, d.Successful, d.Ms, last); err != nil {
				return err
			}
		}
		return nil
	})
	return wrapErr("apply outcomes", err)
}

const sqliteNodeCols = `node_id, account_id, name, total_tasks, successful_tasks, total_ms,
	last_task_at, rating_sum, rating_count, suspended_until`

func scanSQLiteNode(rows *sql.Rows) (NodeStats, error) {
	var n NodeStats
	var last, susp sql.NullInt64
	if err := rows.Scan(&n.NodeID, &n.AccountID, &n.Name, &n.TotalTasks, &n.SuccessfulTasks, &n.TotalMs,
		&last, &n.RatingSum, &n.RatingCount, &susp); err != nil {
		return NodeStats{}, err
	}
	n.LastTaskAt, n.SuspendedUntil = fromNullMicro(last), fromNullMicro(susp)
	return n, nil
}

func (s *sqliteStore) NodeStats(ctx context.Context, nodeIDs []string) (map[string]NodeStats, error) {
	out := make(map[string]NodeStats, len(nodeIDs))
	ids := sortedUnique(nodeIDs)
	// Bounded IN lists stay far below SQLite's variable limit.
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.db.QueryContext(ctx, `SELECT `+sqliteNodeCols+` FROM node_stats WHERE node_id IN (?`+
			strings.Repeat(`, ?`, len(chunk)-1)+`)`, args...)
		if err != nil {
			return nil, wrapErr("node stats", err)
		}
		err = collectNodes(rows, func(n NodeStats) { out[n.NodeID] = n })
		if err != nil {
			return nil, wrapErr("node stats", err)
		}
	}
	return out, nil
}

func (s *sqliteStore) AllNodeStats(ctx context.Context) ([]NodeStats, error) {
	// Nodes of deleted accounts leave the leaderboard with their account.
	rows, err := s.db.QueryContext(ctx, `SELECT `+sqliteNodeCols+` FROM node_stats n
		WHERE NOT EXISTS (SELECT 1 FROM accounts a WHERE a.id = n.account_id AND a.deleted_at IS NOT NULL)
		ORDER BY node_id`)
	if err != nil {
		return nil, wrapErr("all node stats", err)
	}
	out := []NodeStats{}
	err = collectNodes(rows, func(n NodeStats) { out = append(out, n) })
	return out, wrapErr("all node stats", err)
}

func collectNodes(rows *sql.Rows, add func(NodeStats)) error {
	defer rows.Close()
	for rows.Next() {
		n, err := scanSQLiteNode(rows)
		if err != nil {
			return err
		}
		add(n)
	}
	return rows.Err()
}

func (s *sqliteStore) Suspend(ctx context.Context, nodeID string, until time.Time) error {
	if nodeID == "" {
		return fmt.Errorf("store: suspend: empty node id: %w", ErrInvalid)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO node_stats (node_id, suspended_until) VALUES (?, ?)
		ON CONFLICT (node_id) DO UPDATE SET suspended_until = excluded.suspended_until`, nodeID, micro(until))
	return wrapErr("suspend node", err)
}

// --- ratings ---

func (s *sqliteStore) Rate(ctx context.Context, taskID, accountID string, rating int, now time.Time) ([]string, error) {
	if err := checkRating(rating); err != nil {
		return nil, err
	}
	var nodes []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rec, err := s.task(ctx, tx, taskID)
		if err := notFound(err, "task %s", taskID); err != nil {
			return err
		}
		nodes = sortedUnique(rec.NodeIDs)
		if err := checkRate(taskID, rateTarget{rec.AccountID, rec.FinishedAt, nodes}, accountID, now); err != nil {
			return err
		}
		for _, n := range nodes {
			_, err := tx.ExecContext(ctx, `INSERT INTO ratings (task_id, node_id, account_id, rating, created_at) VALUES (?, ?, ?, ?, ?)`,
				taskID, n, accountID, rating, micro(now))
			if isSQLiteUnique(err) {
				return fmt.Errorf("store: task %s is rated already: %w", taskID, ErrConflict)
			}
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO node_stats (node_id, rating_sum, rating_count) VALUES (?, ?, 1)
				ON CONFLICT (node_id) DO UPDATE SET rating_sum = rating_sum + excluded.rating_sum, rating_count = rating_count + 1`,
				n, rating); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, wrapErr("rate", err)
	}
	return nodes, nil
}
