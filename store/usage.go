package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"
)

// DayLayout is how usage days are written: UTC, YYYY-MM-DD.
const DayLayout = "2006-01-02"

// UsageQuery selects usage rows.
type UsageQuery struct {
	// AccountID limits the rows to one account; "" means every account
	// (the operator's view).
	AccountID string
	// From and To are the first and the last UTC day, both included
	// (their time of day is ignored). Both are required.
	From, To time.Time
}

// UsageRow is what the tasks of one account, key and task type cost on one
// UTC day; or, grouped (GroupUsage), the sum over the rows of a group, with
// the fields not grouped by left empty.
type UsageRow struct {
	AccountID string `json:"account_id,omitempty"`
	Day       string `json:"day,omitempty"` // UTC, YYYY-MM-DD
	KeyID     string `json:"key_id,omitempty"`
	TaskType  string `json:"task_type,omitempty"`
	UsageTotals
}

// UsageTotals are the sums of a set of finished tasks.
type UsageTotals struct {
	Requests         int64 `json:"requests"`  // every finished task: completed, failed, errors and cancellations
	Completed        int64 `json:"completed"` // status completed
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	NodeMs           int64 `json:"node_ms"` // processing time, as the nodes reported it
	ContentBytes     int64 `json:"content_bytes"`
	ResultBytes      int64 `json:"result_bytes"`
}

func (t *UsageTotals) add(o UsageTotals) {
	t.Requests += o.Requests
	t.Completed += o.Completed
	t.PromptTokens += o.PromptTokens
	t.CompletionTokens += o.CompletionTokens
	t.NodeMs += o.NodeMs
	t.ContentBytes += o.ContentBytes
	t.ResultBytes += o.ResultBytes
}

// recordTotals is what one finished task's record adds to its usage row:
// the request and its content. What its node did (tokens, node_ms,
// result_bytes) comes from the node's UsageReport.
func recordTotals(r TaskRecord) UsageTotals {
	t := UsageTotals{Requests: 1, ContentBytes: r.ContentBytes}
	if r.Status == StatusCompleted {
		t.Completed = 1
	}
	return t
}

// UsageReport is what a node reported for one task it ran, as the instance
// that holds the node received it: the node's tokens (task_result's usage),
// its processing time and the size of its result. It is counted in
// usage_daily once per task and node, whatever became of the task's
// requester: a task whose client left, or whose requesting instance died,
// after its node answered is counted all the same.
type UsageReport struct {
	TaskID    string `json:"task_id"`
	NodeID    string `json:"node_id"`
	AccountID string `json:"account_id"`
	KeyID     string `json:"key_id"`
	TaskType  string `json:"task_type"`
	// At is when the report arrived; its UTC day is the usage row's.
	At               time.Time `json:"at"`
	PromptTokens     int64     `json:"prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens"`
	NodeMs           int64     `json:"node_ms"`
	ResultBytes      int64     `json:"result_bytes"`
}

// reportTotals is what one node's report adds to its usage row.
func reportTotals(r UsageReport) UsageTotals {
	return UsageTotals{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, NodeMs: r.NodeMs, ResultBytes: r.ResultBytes}
}

func (s *sqlStore) WriteUsage(ctx context.Context, reps []UsageReport) error {
	if len(reps) == 0 {
		return nil
	}
	if err := checkReports(reps); err != nil {
		return err
	}
	return wrapErr("write usage reports", s.db.writeUsage(ctx, reps))
}

// Usage groupings (GroupUsage).
const (
	GroupByAccount  = "account"
	GroupByDay      = "day"
	GroupByKey      = "key"
	GroupByTaskType = "task_type"
)

// GroupUsage sums rows by the given fields (GroupBy constants; none sums
// everything into one row), ordered by those fields. ErrInvalid names an
// unknown one.
func GroupUsage(rows []UsageRow, by []string) ([]UsageRow, error) {
	keep := map[string]bool{}
	for _, b := range by {
		switch b {
		case GroupByAccount, GroupByDay, GroupByKey, GroupByTaskType:
			keep[b] = true
		default:
			return nil, fmt.Errorf("store: cannot group usage by %q (account, day, key or task_type): %w", b, ErrInvalid)
		}
	}
	sums := map[UsageRow]*UsageTotals{}
	var order []UsageRow
	for _, r := range rows {
		var k UsageRow
		if keep[GroupByAccount] {
			k.AccountID = r.AccountID
		}
		if keep[GroupByDay] {
			k.Day = r.Day
		}
		if keep[GroupByKey] {
			k.KeyID = r.KeyID
		}
		if keep[GroupByTaskType] {
			k.TaskType = r.TaskType
		}
		t, ok := sums[k]
		if !ok {
			t = &UsageTotals{}
			sums[k] = t
			order = append(order, k)
		}
		t.add(r.UsageTotals)
	}
	out := make([]UsageRow, 0, len(order))
	for _, k := range order {
		k.UsageTotals = *sums[k]
		out = append(out, k)
	}
	slices.SortFunc(out, compareUsageRows)
	return out, nil
}

func compareUsageRows(a, b UsageRow) int {
	return cmp.Or(cmp.Compare(a.AccountID, b.AccountID), cmp.Compare(a.Day, b.Day),
		cmp.Compare(a.KeyID, b.KeyID), cmp.Compare(a.TaskType, b.TaskType))
}

func (s *sqlStore) Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error) {
	if q.From.IsZero() || q.To.IsZero() {
		return nil, fmt.Errorf("store: usage: a first and a last day are required: %w", ErrInvalid)
	}
	from, to := q.From.UTC().Format(DayLayout), q.To.UTC().Format(DayLayout)
	query := `SELECT account_id, day, key_id, task_type, requests, completed, prompt_tokens, completion_tokens,
		node_ms, content_bytes, result_bytes FROM usage_daily WHERE day >= $1 AND day <= $2`
	args := []any{from, to}
	if q.AccountID != "" {
		query += ` AND account_id = $3`
		args = append(args, q.AccountID)
	}
	query += ` ORDER BY account_id, day, key_id, task_type`
	rs, err := s.db.query(ctx, query, args...)
	if err != nil {
		return nil, wrapErr("usage", err)
	}
	defer rs.Close()
	out := []UsageRow{}
	for rs.Next() {
		var r UsageRow
		if err := rs.Scan(&r.AccountID, &r.Day, &r.KeyID, &r.TaskType, &r.Requests, &r.Completed,
			&r.PromptTokens, &r.CompletionTokens, &r.NodeMs, &r.ContentBytes, &r.ResultBytes); err != nil {
			return nil, wrapErr("usage", err)
		}
		out = append(out, r)
	}
	return out, wrapErr("usage", rs.Err())
}

// usageSums gathers, in SQLite's writeTasks and writeUsage, what the tasks
// and reports a batch inserted add to usage_daily.
type usageSums map[UsageRow]*UsageTotals

// add adds o to the row of account, key and task type on at's UTC day.
func (u *usageSums) add(account, key, taskType string, at time.Time, o UsageTotals) {
	if *u == nil {
		*u = usageSums{}
	}
	k := UsageRow{AccountID: account, Day: dbTime(at).Format(DayLayout), KeyID: key, TaskType: taskType}
	t, ok := (*u)[k]
	if !ok {
		t = &UsageTotals{}
		(*u)[k] = t
	}
	t.add(o)
}

func (u usageSums) write(ctx context.Context, tx *sql.Tx) error {
	if len(u) == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage_daily AS d (account_id, day, key_id, task_type, requests, completed,
		prompt_tokens, completion_tokens, node_ms, content_bytes, result_bytes)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (account_id, day, key_id, task_type) DO UPDATE SET
		requests = d.requests + excluded.requests, completed = d.completed + excluded.completed,
		prompt_tokens = d.prompt_tokens + excluded.prompt_tokens,
		completion_tokens = d.completion_tokens + excluded.completion_tokens,
		node_ms = d.node_ms + excluded.node_ms, content_bytes = d.content_bytes + excluded.content_bytes,
		result_bytes = d.result_bytes + excluded.result_bytes`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for k, t := range u {
		if _, err := stmt.ExecContext(ctx, k.AccountID, k.Day, k.KeyID, k.TaskType, t.Requests, t.Completed,
			t.PromptTokens, t.CompletionTokens, t.NodeMs, t.ContentBytes, t.ResultBytes); err != nil {
			return err
		}
	}
	return nil
}
