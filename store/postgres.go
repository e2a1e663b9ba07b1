package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgConn runs the store's statements on PostgreSQL, through pgx's pool
// (pgx's own protocol, statements prepared and cached per connection),
// shared by every instance of a cluster. Tables live in the first schema
// of the connection's search_path.
type pgConn struct {
	pgQuerier
	pool *pgxpool.Pool
}

var _ conn = (*pgConn)(nil)

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

func openPostgres(ctx context.Context, opts Options) (*pgConn, error) {
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
	return &pgConn{pgQuerier: pgQuerier{pool}, pool: pool}, nil
}

func (c *pgConn) ping(ctx context.Context) error {
	if err := c.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping PostgreSQL: %w", err)
	}
	return nil
}

func (c *pgConn) close() error {
	c.pool.Close()
	return nil
}

func (c *pgConn) inTx(ctx context.Context, fn func(querier) error) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error { return fn(pgQuerier{tx}) })
}

func (c *pgConn) execAll(ctx context.Context, q string, args [][]any) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, a := range args {
			b.Queue(q, a...)
		}
		return tx.SendBatch(ctx, b).Close()
	})
}

// pgQuerier runs statements on the pool or in a transaction.
type pgQuerier struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (p pgQuerier) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := p.q.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (p pgQuerier) queryRow(ctx context.Context, q string, args ...any) row {
	return p.q.QueryRow(ctx, q, args...)
}

func (p pgQuerier) query(ctx context.Context, q string, args ...any) (rows, error) {
	return p.q.Query(ctx, q, args...)
}

func (c *pgConn) writeTasks(ctx context.Context, recs []TaskRecord) error {
	// One statement for the whole batch: the rows go as one array per
	// column (the strings and times as array literals: pgarray.go) and are
	// unnested on the server, where an INSERT per row (even
	// sent together) was parsed, planned and run once per task. At 2,500
	// tasks/s the PostgreSQL backends used 13 % of a core before, 10 %
	// after (one run each; the indexes' work is the rest). The same
	// statement adds the tasks it inserted, and only those (a retried batch
	// inserts nothing twice), to usage_daily: the requests counted there
	// are the task history's, whatever happens between the two.
	n := len(recs)
	var (
		ids, accounts, keys, types, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		codes, nodeIDs, requesters, owners   = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		retries                              = make([]string, n)
		streams                              = make([]bool, n)
		attempts                             = make([]int32, n)
		created, finished                    = make([]time.Time, n), make([]time.Time, n)
		assigned                             = make([]*time.Time, n)
		procMs, contentB, resultB            = make([]int64, n), make([]int64, n), make([]int64, n)
		promptT, completionT                 = make([]int64, n), make([]int64, n)
	)
	for i, r := range recs {
		r = cleanRecord(r)
		// A text[] per row does not fit an array of rows (PostgreSQL arrays
		// are rectangular): each row's node ids go as a text[] literal of
		// their own, an element of the column's literal, cast per row on
		// the server. (As a JSON array unnested by a subquery per row, the
		// statement cost the server ~12 % more CPU a task:
		// BenchmarkTaskHistoryCopyVsUnnest.)
		ns := pgTextArray(r.NodeIDs)
		ids[i], accounts[i], keys[i], types[i], statuses[i] = r.ID, r.AccountID, r.KeyID, r.TaskType, r.Status
		codes[i], nodeIDs[i], requesters[i], owners[i] = r.ErrorCode, ns, r.Requester, r.Owner
		streams[i], attempts[i], retries[i] = r.Stream, int32(r.Attempts), encodeRetries(r.Retries)
		created[i], finished[i], assigned[i] = dbTime(r.CreatedAt), dbTime(r.FinishedAt), optTime(dbTime(r.AssignedAt))
		procMs[i], contentB[i], resultB[i] = r.ProcessingMs, r.ContentBytes, r.ResultBytes
		promptT[i], completionT[i] = r.Usage.PromptTokens, r.Usage.CompletionTokens
	}
	// The usage rows are upserted in key order, so that two batches
	// touching the same rows lock them in the same order (no deadlock).
	// A task record adds its request and content; its node's tokens,
	// time and result come from the node's report (writeUsage).
	_, err := c.pool.Exec(ctx, `WITH ins AS (
		INSERT INTO tasks (id, account_id, key_id, task_type, stream, status, error_code,
			node_ids, requester_instance, owner_instance, attempts, created_at, assigned_at, finished_at,
			processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens, retries)
		SELECT u.id, u.account_id, u.key_id, u.task_type, u.stream, u.status, u.error_code,
			u.node_ids::text[], u.requester, u.owner, u.attempts,
			u.created_at, u.assigned_at, u.finished_at,
			u.processing_ms, u.content_bytes, u.result_bytes, u.prompt_tokens, u.completion_tokens, u.retries
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::boolean[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::integer[], $12::timestamptz[], $13::timestamptz[], $14::timestamptz[],
			$15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[], $19::bigint[], $20::text[])
			AS u(id, account_id, key_id, task_type, stream, status, error_code,
			node_ids, requester, owner, attempts, created_at, assigned_at, finished_at,
			processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens, retries)
		ON CONFLICT (id) DO NOTHING
		RETURNING account_id, key_id, task_type, status, finished_at, content_bytes)
	INSERT INTO usage_daily AS d (account_id, day, key_id, task_type, requests, completed, content_bytes)
	SELECT account_id, to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, key_id, task_type,
		count(*), count(*) FILTER (WHERE status = 'completed'), sum(content_bytes)
	FROM ins GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
	ON CONFLICT (account_id, day, key_id, task_type) DO UPDATE SET
		requests = d.requests + EXCLUDED.requests, completed = d.completed + EXCLUDED.completed,
		content_bytes = d.content_bytes + EXCLUDED.content_bytes`,
		pgTextArray(ids), pgTextArray(accounts), pgTextArray(keys), pgTextArray(types), streams,
		pgTextArray(statuses), pgTextArray(codes), pgTextArray(nodeIDs), pgTextArray(requesters), pgTextArray(owners),
		attempts, pgTimeArray(created), pgOptTimeArray(assigned), pgTimeArray(finished),
		procMs, contentB, resultB, promptT, completionT, pgTextArray(retries))
	return err
}

func (c *pgConn) writeUsage(ctx context.Context, reps []UsageReport) error {
	// As writeTasks: one statement, the rows as one array per column; the
	// reports it inserted, and only those, added to usage_daily.
	n := len(reps)
	var (
		tasks, nodes, accounts, keys, types = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		at                                  = make([]time.Time, n)
		promptT, completionT, ms, resultB   = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	)
	for i, r := range reps {
		r = cleanReport(r)
		tasks[i], nodes[i], accounts[i], keys[i], types[i] = r.TaskID, r.NodeID, r.AccountID, r.KeyID, r.TaskType
		at[i] = dbTime(r.At)
		promptT[i], completionT[i], ms[i], resultB[i] = r.PromptTokens, r.CompletionTokens, r.NodeMs, r.ResultBytes
	}
	_, err := c.pool.Exec(ctx, `WITH ins AS (
		INSERT INTO usage_reports (task_id, node_id, account_id, key_id, task_type,
			reported_at, prompt_tokens, completion_tokens, node_ms, result_bytes)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
			$6::timestamptz[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])
		ON CONFLICT (task_id, node_id) DO NOTHING
		RETURNING account_id, key_id, task_type, reported_at, prompt_tokens, completion_tokens, node_ms, result_bytes)
	INSERT INTO usage_daily AS d (account_id, day, key_id, task_type,
		prompt_tokens, completion_tokens, node_ms, result_bytes)
	SELECT account_id, to_char(reported_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, key_id, task_type,
		sum(prompt_tokens), sum(completion_tokens), sum(node_ms), sum(result_bytes)
	FROM ins GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
	ON CONFLICT (account_id, day, key_id, task_type) DO UPDATE SET
		prompt_tokens = d.prompt_tokens + EXCLUDED.prompt_tokens,
		completion_tokens = d.completion_tokens + EXCLUDED.completion_tokens,
		node_ms = d.node_ms + EXCLUDED.node_ms, result_bytes = d.result_bytes + EXCLUDED.result_bytes`,
		pgTextArray(tasks), pgTextArray(nodes), pgTextArray(accounts), pgTextArray(keys), pgTextArray(types),
		pgTimeArray(at), promptT, completionT, ms, resultB)
	return err
}
