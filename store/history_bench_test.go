package store

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
)

// BenchmarkTaskHistoryCopyVsUnnest weighs three ways to write a batch of
// task records: writeTasks' one statement (the batch as one array per
// column, each row's node ids a text[] literal of their own, unnested on
// the server); the same with the node ids as JSON, unnested by a subquery
// per row (writeTasksJSON, what it did before); and COPY (writeTasksCopy:
// pgx's CopyFrom, binary, a row of interfaces per task, into a temporary
// table, then moved into tasks by the same INSERT … ON CONFLICT DO NOTHING
// RETURNING that feeds usage_daily, since COPY itself can neither skip a
// task a retried batch already wrote nor say which rows it inserted; one
// transaction). One connection, so the server's CPU is that one backend's
// (/proc/<pid>/stat: the database must run on this machine); the client's
// is this process's (getrusage). Both are reported per task, beside the
// allocations per batch of 500 (the Writer's BatchSize, about what its
// 200 ms hold at 2,500 tasks/s). The temporary table is made in each
// transaction, IF NOT EXISTS, as a writer on a pool would. At the end the tasks table and usage_daily must hold every task written.
func BenchmarkTaskHistoryCopyVsUnnest(b *testing.B) {
	const batch = 500
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := openPostgres(ctx, Options{DatabaseURL: pgtest.SchemaURL(b, "sycopy") + "&pool_max_conns=1", Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.close() })
	var pid int
	if err := c.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	if _, err := procCPU(pid); err != nil {
		b.Skipf("the database's backend is not readable in /proc here: %v", err)
	}
	now, n := time.Now(), 0
	recs := make([]TaskRecord, batch)
	fill := func() {
		for i := range recs {
			n++
			recs[i] = TaskRecord{ID: fmt.Sprintf("t%09d", n), AccountID: "acct", KeyID: "key", TaskType: "chat", Status: StatusCompleted,
				NodeIDs: []string{"n1"}, Requester: "inst-1", Owner: "inst-1", Attempts: 1,
				CreatedAt: now, AssignedAt: now, FinishedAt: now, ProcessingMs: 3, ContentBytes: 40, ResultBytes: 60}
		}
	}
	for _, v := range []struct {
		name  string
		write func(context.Context, []TaskRecord) error
	}{{"literals", c.writeTasks}, {"json", c.writeTasksJSON}, {"copy", c.writeTasksCopy}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			var server, client time.Duration
			for b.Loop() {
				b.StopTimer()
				fill()
				s0, err := procCPU(pid)
				if err != nil {
					b.Fatal(err)
				}
				c0 := selfCPU()
				b.StartTimer()
				if err := v.write(ctx, recs); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				client += selfCPU() - c0
				s1, err := procCPU(pid)
				if err != nil {
					b.Fatal(err)
				}
				server += s1 - s0
				b.StartTimer()
			}
			tasks := float64(b.N * batch)
			b.ReportMetric(float64(server.Microseconds())/tasks, "server-µs/task")
			b.ReportMetric(float64(client.Microseconds())/tasks, "client-µs/task")
		})
	}
	var rows, requests int64
	if err := c.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks), (SELECT coalesce(sum(requests), 0) FROM usage_daily)`).Scan(&rows, &requests); err != nil {
		b.Fatal(err)
	}
	if rows != int64(n) || requests != int64(n) {
		b.Fatalf("%d tasks written, the table holds %d and usage_daily counts %d", n, rows, requests)
	}
}

// writeTasksCopy is writeTasks by COPY, for the benchmark above.
func (c *pgConn) writeTasksCopy(ctx context.Context, recs []TaskRecord) error {
	cols := []string{"id", "account_id", "key_id", "task_type", "stream", "status", "error_code",
		"node_ids", "requester_instance", "owner_instance", "attempts", "created_at", "assigned_at", "finished_at",
		"processing_ms", "content_bytes", "result_bytes", "prompt_tokens", "completion_tokens"}
	row := make([]any, len(cols))
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		// As a writer would: the table on whichever pooled connection this is.
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS tasks_in (LIKE tasks) ON COMMIT DELETE ROWS`); err != nil {
			return err
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"tasks_in"}, cols, pgx.CopyFromSlice(len(recs), func(i int) ([]any, error) {
			r := cleanRecord(recs[i])
			row[0], row[1], row[2], row[3], row[4], row[5], row[6] = r.ID, r.AccountID, r.KeyID, r.TaskType, r.Stream, r.Status, r.ErrorCode
			row[7], row[8], row[9], row[10] = nonNil(r.NodeIDs), r.Requester, r.Owner, int32(r.Attempts)
			row[11], row[12], row[13] = dbTime(r.CreatedAt), optTime(dbTime(r.AssignedAt)), dbTime(r.FinishedAt)
			row[14], row[15], row[16], row[17], row[18] = r.ProcessingMs, r.ContentBytes, r.ResultBytes, r.Usage.PromptTokens, r.Usage.CompletionTokens
			return row, nil
		}))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `WITH ins AS (
			INSERT INTO tasks (`+strings.Join(cols, ", ")+`)
			SELECT `+strings.Join(cols, ", ")+` FROM tasks_in
			ON CONFLICT (id) DO NOTHING
			RETURNING account_id, key_id, task_type, status, finished_at, content_bytes)
		INSERT INTO usage_daily AS d (account_id, day, key_id, task_type, requests, completed, content_bytes)
		SELECT account_id, to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, key_id, task_type,
			count(*), count(*) FILTER (WHERE status = 'completed'), sum(content_bytes)
		FROM ins GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
		ON CONFLICT (account_id, day, key_id, task_type) DO UPDATE SET
			requests = d.requests + EXCLUDED.requests, completed = d.completed + EXCLUDED.completed,
			content_bytes = d.content_bytes + EXCLUDED.content_bytes`)
		return err
	})
}

// procCPU is a process's user and system CPU time so far, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s).
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) ": field 3 on
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeTasksJSON is writeTasks as it was before its node ids went as
// text[] literals: each row's as a JSON array, unnested on the server by a
// subquery per row. For the benchmark above.
func (c *pgConn) writeTasksJSON(ctx context.Context, recs []TaskRecord) error {
	n := len(recs)
	var (
		ids, accounts, keys, types, statuses = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		codes, nodeIDs, requesters, owners   = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
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
		// are rectangular): each row's node ids go as a JSON array.
		ns, err := json.Marshal(nonNil(r.NodeIDs))
		if err != nil {
			return err
		}
		ids[i], accounts[i], keys[i], types[i], statuses[i] = r.ID, r.AccountID, r.KeyID, r.TaskType, r.Status
		codes[i], nodeIDs[i], requesters[i], owners[i] = r.ErrorCode, string(ns), r.Requester, r.Owner
		streams[i], attempts[i] = r.Stream, int32(r.Attempts)
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
			processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens)
		SELECT u.id, u.account_id, u.key_id, u.task_type, u.stream, u.status, u.error_code,
			ARRAY(SELECT x.e FROM jsonb_array_elements_text(u.node_ids::jsonb) WITH ORDINALITY AS x(e, o) ORDER BY x.o), u.requester, u.owner, u.attempts,
			u.created_at, u.assigned_at, u.finished_at,
			u.processing_ms, u.content_bytes, u.result_bytes, u.prompt_tokens, u.completion_tokens
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::boolean[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::integer[], $12::timestamptz[], $13::timestamptz[], $14::timestamptz[],
			$15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[], $19::bigint[])
			AS u(id, account_id, key_id, task_type, stream, status, error_code,
			node_ids, requester, owner, attempts, created_at, assigned_at, finished_at,
			processing_ms, content_bytes, result_bytes, prompt_tokens, completion_tokens)
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
		procMs, contentB, resultB, promptT, completionT)
	return err
}
