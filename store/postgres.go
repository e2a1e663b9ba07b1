package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgStore keeps everything in PostgreSQL, shared by every instance of a
// cluster. Tables live in the first schema of the connection's search_path.
type pgStore struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

var _ Store = (*pgStore)(nil)

// parsePostgres parses the URL and returns a description for messages
// ("host:port/db") that never includes the password.
func parsePostgres(url string) (*pgxpool.Config, string, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx masks the password in the URL it quotes back.
		return nil, "", fmt.Errorf("store: --database-url is not a valid PostgreSQL URL: %w", err)
	}
	cc := cfg.ConnConfig
	return cfg, fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database), nil
}

func openPostgres(ctx context.Context, opts Options) (Store, error) {
	cfg, where, err := parsePostgres(opts.DatabaseURL)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("store: cannot open PostgreSQL at %s: %w (check --database-url)", where, err)
	}
	if _, err := migratePostgres(ctx, cfg.ConnConfig, where, opts.Logger); err != nil {
		pool.Close()
		return nil, err
	}
	opts.Logger.Info("store opened", "dialect", "postgres", "database", where)
	return &pgStore{pool: pool, log: opts.Logger}, nil
}

func (s *pgStore) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping PostgreSQL: %w", err)
	}
	return nil
}

func (s *pgStore) Close() error {
	s.pool.Close()
	return nil
}

func isPGUnique(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == "23505"
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	return timePtr(t.UTC())
}

// --- accounts ---

const pgAccountCols = `id, name, email, trust, created_at`

func scanPGAccount(row pgx.Row) (Account, error) {
	var a Account
	if err := row.Scan(&a.ID, &a.Name, &a.Email, &a.Trust, &a.CreatedAt); err != nil {
		return Account{}, err
	}
	a.CreatedAt = a.CreatedAt.UTC()
	return a, nil
}

func (s *pgStore) CreateAccount(ctx context.Context, name, email, trust string) (Account, string, error) {
	trust, err := checkAccount(name, email, trust)
	if err != nil {
		return Account{}, "", err
	}
	a := Account{ID: newAccountID(), Name: name, Email: email, Trust: trust, CreatedAt: dbTime(time.Now())}
	var key string
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO accounts (id, name, email, trust, created_at) VALUES ($1, $2, $3, $4, $5)`,
			a.ID, a.Name, a.Email, a.Trust, a.CreatedAt)
		if isPGUnique(err) {
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

func (s *pgStore) Account(ctx context.Context, id string) (Account, error) {
	a, err := scanPGAccount(s.pool.QueryRow(ctx,
		`SELECT `+pgAccountCols+` FROM accounts WHERE id = $1 AND deleted_at IS NULL`, id))
	return a, notFound(err, "account %s", id)
}

func (s *pgStore) AccountByName(ctx context.Context, name string) (Account, error) {
	a, err := scanPGAccount(s.pool.QueryRow(ctx,
		`SELECT `+pgAccountCols+` FROM accounts WHERE name = $1 AND deleted_at IS NULL`, name))
	return a, notFound(err, "account named %q", name)
}

func (s *pgStore) DeleteAccount(ctx context.Context, id string) error {
	now := dbTime(time.Now())
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE accounts SET deleted_at = $1 WHERE id = $2 AND deleted_at IS NULL`, now, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("store: account %s: %w", id, ErrNotFound)
		}
		_, err = tx.Exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE account_id = $2 AND revoked_at IS NULL`, now, id)
		return err
	})
	return wrapErr("delete account", err)
}

// --- keys ---

func (s *pgStore) insertKey(ctx context.Context, tx pgx.Tx, accountID string) (APIKey, string, error) {
	key, hash, prefix, err := newKey()
	if err != nil {
		return APIKey{}, "", err
	}
	id, err := newKeyID()
	if err != nil {
		return APIKey{}, "", err
	}
	k := APIKey{ID: id, AccountID: accountID, Prefix: prefix, CreatedAt: dbTime(time.Now())}
	_, err = tx.Exec(ctx, `INSERT INTO api_keys (id, account_id, hash, prefix, created_at) VALUES ($1, $2, $3, $4, $5)`,
		k.ID, k.AccountID, hash, k.Prefix, k.CreatedAt)
	if err != nil {
		return APIKey{}, "", err
	}
	return k, key, nil
}

func (s *pgStore) CreateKey(ctx context.Context, accountID string) (APIKey, string, error) {
	var k APIKey
	var key string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// FOR SHARE holds off a concurrent DeleteAccount, which would
		// otherwise miss the new key when it revokes the account's keys.
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM accounts WHERE id = $1 AND deleted_at IS NULL FOR SHARE`, accountID).Scan(&one)
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

func (s *pgStore) ListKeys(ctx context.Context, accountID string) ([]APIKey, error) {
	q := `SELECT k.id, k.account_id, k.prefix, k.created_at, k.revoked_at
		FROM api_keys k JOIN accounts a ON a.id = k.account_id
		WHERE a.deleted_at IS NULL`
	var args []any
	if accountID != "" {
		if _, err := s.Account(ctx, accountID); err != nil {
			return nil, err
		}
		q += ` AND k.account_id = $1`
		args = append(args, accountID)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY k.created_at, k.id`, args...)
	if err != nil {
		return nil, wrapErr("list keys", err)
	}
	keys := []APIKey{}
	var k APIKey
	_, err = pgx.ForEachRow(rows, []any{&k.ID, &k.AccountID, &k.Prefix, &k.CreatedAt, &k.RevokedAt}, func() error {
		k.CreatedAt, k.RevokedAt = k.CreatedAt.UTC(), utcPtr(k.RevokedAt)
		keys = append(keys, k)
		k.RevokedAt = nil // Scan leaves a NULL's pointer untouched
		return nil
	})
	if err != nil {
		return nil, wrapErr("list keys", err)
	}
	return keys, nil
}

func (s *pgStore) RevokeKey(ctx context.Context, idOrPrefix string) error {
	if idOrPrefix == "" {
		return fmt.Errorf("store: revoke key: no key id or prefix given: %w", ErrInvalid)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id FROM api_keys WHERE id = $1 OR prefix = $1 OR hash = $2 FOR UPDATE`,
			idOrPrefix, revokeHash(idOrPrefix))
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if err := oneKey(idOrPrefix, ids); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, dbTime(time.Now()), ids[0])
		return err
	})
	return wrapErr("revoke key", err)
}

func (s *pgStore) Authenticate(ctx context.Context, key string) (Account, error) {
	if !looksLikeKey(key) {
		return Account{}, fmt.Errorf("store: unknown API key: %w", ErrNotFound)
	}
	a, err := scanPGAccount(s.pool.QueryRow(ctx, `SELECT a.id, a.name, a.email, a.trust, a.created_at
		FROM api_keys k JOIN accounts a ON a.id = k.account_id
		WHERE k.hash = $1 AND k.revoked_at IS NULL AND a.deleted_at IS NULL`, hashKey(key)))
	return a, notFound(err, "API key")
}

// --- tasks ---

func (s *pgStore) WriteTasks(ctx context.Context, recs []TaskRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if err := checkTasks(recs); err != nil {
		return err
	}
	// One statement for the whole batch: the rows go as one array per
	// column and are unnested on the server, where an INSERT per row (even
	// sent together) was parsed, planned and run once per task. At 2,500
	// tasks/s the PostgreSQL backends used 13 % of a core before, 10 %
	// after (one run each; the indexes' work is the rest).
	n := len(recs)
	var (
		ids, accounts, types, statuses, codes = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		nodeIDs, requesters, owners           = make([]string, n), make([]string, n), make([]string, n)
		streams                               = make([]bool, n)
		attempts                              = make([]int32, n)
		created, finished                     = make([]time.Time, n), make([]time.Time, n)
		assigned                              = make([]*time.Time, n)
		procMs, contentB, resultB             = make([]int64, n), make([]int64, n), make([]int64, n)
		promptT, completionT                  = make([]int64, n), make([]int64, n)
	)
	for i, r := range recs {
		r = cleanRecord(r)
		// A text[] per row does not fit an array of rows (PostgreSQL arrays
		// are rectangular): each row's node ids go as a JSON array.
		ns, err := json.Marshal(nonNil(r.NodeIDs))
		if err != nil {
			return wrapErr("write tasks", err)
		}
		ids[i], accounts[i], types[i], statuses[i], codes[i] = r.ID, r.AccountID, r.TaskType, r.Status, r.ErrorCode
		nodeIDs[i], requesters[i], owners[i] = string(ns), r.Requester, r.Owner
		streams[i], attempts[i] = r.Stream, int32(r.Attempts)
		created[i], finished[i] = dbTime(r.CreatedAt), dbTime(r.FinishedAt)
		if !r.AssignedAt.IsZero() {
			assigned[i] = timePtr(dbTime(r.AssignedAt))
		}
		procMs[i], contentB[i], resultB[i] = r.ProcessingMs, r.ContentBytes, r.ResultBytes
		promptT[i], completionT[i] = r.Usage.PromptTokens, r.Usage.CompletionTokens
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO tasks (id, account_id, task_type, stream, status, error_code,
		node_ids, requester_instance, owner_instance, attempts, created_at, assigned_at, finished_at,
		processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens)
		SELECT u.id, u.account_id, u.task_type, u.stream, u.status, u.error_code,
			ARRAY(SELECT x.e FROM jsonb_array_elements_text(u.node_ids::jsonb) WITH ORDINALITY AS x(e, o) ORDER BY x.o), u.requester, u.owner, u.attempts,
			u.created_at, u.assigned_at, u.finished_at,
			u.processing_ms, u.content_bytes, u.result_bytes, u.prompt_tokens, u.completion_tokens
		FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::text[], $6::text[],
			$7::text[], $8::text[], $9::text[], $10::integer[], $11::timestamptz[], $12::timestamptz[], $13::timestamptz[],
			$14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[])
			AS u(id, account_id, task_type, stream, status, error_code,
			node_ids, requester, owner, attempts, created_at, assigned_at, finished_at,
			processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens)
		ON CONFLICT (id) DO NOTHING`,
		ids, accounts, types, streams, statuses, codes,
		nodeIDs, requesters, owners, attempts, created, assigned, finished,
		procMs, contentB, resultB, promptT, completionT)
	return wrapErr("write tasks", err)
}

func (s *pgStore) Task(ctx context.Context, id string) (TaskRecord, error) {
	var r TaskRecord
	var assigned *time.Time
	err := s.pool.QueryRow(ctx, `SELECT id, account_id, task_type, stream, status, error_code, node_ids,
		requester_instance, owner_instance, attempts, created_at, assigned_at, finished_at,
		processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens
		FROM tasks WHERE id = $1`, id).Scan(&r.ID, &r.AccountID, &r.TaskType, &r.Stream, &r.Status, &r.ErrorCode, &r.NodeIDs,
		&r.Requester, &r.Owner, &r.Attempts, &r.CreatedAt, &assigned, &r.FinishedAt,
		&r.ProcessingMs, &r.ContentBytes, &r.ResultBytes, &r.Usage.PromptTokens, &r.Usage.CompletionTokens)
	if err != nil {
		return TaskRecord{}, notFound(err, "task %s", id)
	}
	r.NodeIDs = nonNil(r.NodeIDs)
	r.CreatedAt, r.FinishedAt = r.CreatedAt.UTC(), r.FinishedAt.UTC()
	if assigned != nil {
		r.AssignedAt = assigned.UTC()
	}
	return r, nil
}

func (s *pgStore) CountCompletedSince(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status = $1 AND finished_at >= $2`,
		StatusCompleted, dbTime(t)).Scan(&n)
	return n, wrapErr("count tasks", err)
}

// --- nodes ---

func (s *pgStore) RecordNode(ctx context.Context, nodeID, accountID, name string) error {
	if nodeID == "" {
		return fmt.Errorf("store: record node: empty node id: %w", ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO node_stats (node_id, account_id, name) VALUES ($1, $2, $3)
		ON CONFLICT (node_id) DO UPDATE SET account_id = EXCLUDED.account_id, name = EXCLUDED.name`,
		nodeID, accountID, cleanText(name))
	return wrapErr("record node", err)
}

func (s *pgStore) SaveBenchmark(ctx context.Context, nodeID string, profile []byte, at time.Time) error {
	if nodeID == "" || !json.Valid(profile) {
		return fmt.Errorf("store: save benchmark: empty node id or invalid JSON: %w", ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO benchmarks (node_id, profile, measured_at) VALUES ($1, $2, $3)
		ON CONFLICT (node_id) DO UPDATE SET profile = EXCLUDED.profile, measured_at = EXCLUDED.measured_at`,
		nodeID, string(profile), dbTime(at))
	return wrapErr("save benchmark", err)
}

func (s *pgStore) Benchmark(ctx context.Context, nodeID string) ([]byte, time.Time, error) {
	var profile []byte
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT profile::text, measured_at FROM benchmarks WHERE node_id = $1`, nodeID).Scan(&profile, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, time.Time{}, fmt.Errorf("store: benchmark of %s: %w", nodeID, ErrNotFound)
	}
	if err != nil {
		return nil, time.Time{}, wrapErr("benchmark", err)
	}
	return profile, at.UTC(), nil
}

func (s *pgStore) ApplyOutcomes(ctx context.Context, outs []Outcome) error {
	if len(outs) == 0 {
		return nil
	}
	if err := checkOutcomes(outs); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, d := range aggregateOutcomes(outs) {
			var last *time.Time
			if !d.LastAt.IsZero() {
				last = timePtr(dbTime(d.LastAt))
			}
			// GREATEST ignores NULLs, so a first time or a batch without
			// times both do the right thing.
			b.Queue(`INSERT INTO node_stats (node_id, total_tasks, successful_tasks, total_ms, last_task_at)
				VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT (node_id) DO UPDATE SET
					total_tasks = node_stats.total_tasks + EXCLUDED.total_tasks,
					successful_tasks = node_stats.successful_tasks + EXCLUDED.successful_tasks,
					total_ms = node_stats.total_ms + EXCLUDED.total_ms,
					last_task_at = GREATEST(node_stats.last_task_at, EXCLUDED.last_task_at)`,
				d.NodeID, d.Tasks, d.Successful, d.Ms, last)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	return wrapErr("apply outcomes", err)
}

const pgNodeCols = `node_id, account_id, name, total_tasks, successful_tasks, total_ms,
	last_task_at, rating_sum, rating_count, suspended_until`

func collectPGNodes(rows pgx.Rows, add func(NodeStats)) error {
	var n NodeStats
	_, err := pgx.ForEachRow(rows, []any{&n.NodeID, &n.AccountID, &n.Name, &n.TotalTasks, &n.SuccessfulTasks, &n.TotalMs,
		&n.LastTaskAt, &n.RatingSum, &n.RatingCount, &n.SuspendedUntil}, func() error {
		c := n
		c.LastTaskAt, c.SuspendedUntil = utcPtr(n.LastTaskAt), utcPtr(n.SuspendedUntil)
		add(c)
		n.LastTaskAt, n.SuspendedUntil = nil, nil // Scan leaves a NULL's pointer untouched
		return nil
	})
	return err
}

func (s *pgStore) NodeStats(ctx context.Context, nodeIDs []string) (map[string]NodeStats, error) {
	out := make(map[string]NodeStats, len(nodeIDs))
	ids := sortedUnique(nodeIDs)
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+pgNodeCols+` FROM node_stats WHERE node_id = ANY($1)`, ids)
	if err != nil {
		return nil, wrapErr("node stats", err)
	}
	err = collectPGNodes(rows, func(n NodeStats) { out[n.NodeID] = n })
	if err != nil {
		return nil, wrapErr("node stats", err)
	}
	return out, nil
}

func (s *pgStore) AllNodeStats(ctx context.Context) ([]NodeStats, error) {
	// Nodes of deleted accounts leave the leaderboard with their account.
	rows, err := s.pool.Query(ctx, `SELECT `+pgNodeCols+` FROM node_stats n
		WHERE NOT EXISTS (SELECT 1 FROM accounts a WHERE a.id = n.account_id AND a.deleted_at IS NOT NULL)
		ORDER BY node_id`)
	if err != nil {
		return nil, wrapErr("all node stats", err)
	}
	out := []NodeStats{}
	err = collectPGNodes(rows, func(n NodeStats) { out = append(out, n) })
	if err != nil {
		return nil, wrapErr("all node stats", err)
	}
	return out, nil
}

func (s *pgStore) Suspend(ctx context.Context, nodeID string, until time.Time) error {
	if nodeID == "" {
		return fmt.Errorf("store: suspend: empty node id: %w", ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO node_stats (node_id, suspended_until) VALUES ($1, $2)
		ON CONFLICT (node_id) DO UPDATE SET suspended_until = EXCLUDED.suspended_until`, nodeID, dbTime(until))
	return wrapErr("suspend node", err)
}

// --- ratings ---

func (s *pgStore) Rate(ctx context.Context, taskID, accountID string, rating int, now time.Time) ([]string, error) {
	if err := checkRating(rating); err != nil {
		return nil, err
	}
	var nodes []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// FOR UPDATE queues concurrent ratings of one task behind each
		// other, so the second sees the first's rows and gets ErrConflict.
		var t rateTarget
		err := tx.QueryRow(ctx, `SELECT account_id, finished_at, node_ids FROM tasks WHERE id = $1 FOR UPDATE`, taskID).
			Scan(&t.AccountID, &t.FinishedAt, &t.NodeIDs)
		if err := notFound(err, "task %s", taskID); err != nil {
			return err
		}
		nodes = sortedUnique(t.NodeIDs)
		t.NodeIDs = nodes
		if err := checkRate(taskID, t, accountID, now); err != nil {
			return err
		}
		for _, n := range nodes {
			tag, err := tx.Exec(ctx, `INSERT INTO ratings (task_id, node_id, account_id, rating, created_at)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, taskID, n, accountID, rating, dbTime(now))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("store: task %s is rated already: %w", taskID, ErrConflict)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO node_stats (node_id, rating_sum, rating_count) VALUES ($1, $2, 1)
				ON CONFLICT (node_id) DO UPDATE SET rating_sum = node_stats.rating_sum + EXCLUDED.rating_sum,
					rating_count = node_stats.rating_count + 1`, n, rating); err != nil {
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
