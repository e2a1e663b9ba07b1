package server

import (
	"encoding/csv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/store"
)

// Usage: what each key spent, read from the store's usage ledger (written
// with the task history, so a task appears there once the writer has
// flushed it, within about a second).
//
//	GET /api/v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD&group_by=key,task_type,day[&format=csv]
//	GET /admin/api/usage?…&account_id=…   (every account; group_by may add account)

// usageMaxDays bounds a query's range: a year of days.
const usageMaxDays = 366

// usageView is the JSON answer.
type usageView struct {
	From    string            `json:"from"` // UTC days, both included
	To      string            `json:"to"`
	GroupBy []string          `json:"group_by"`
	Rows    []store.UsageRow  `json:"rows"`
	Total   store.UsageTotals `json:"total"`
}

// usage is GET /api/v1/usage: the calling account's usage, or its key's
// alone for a scoped key (readsKey).
func (a *App) usage(c echo.Context) error {
	return a.answerUsage(c, accountOf(c).ID, readsKey(accountOf(c)), false)
}

// adminUsage is GET /admin/api/usage: every account's, or one's
// (account_id=).
func (a *App) adminUsage(c echo.Context) error {
	return a.answerUsage(c, c.QueryParam("account_id"), "", true)
}

// answerUsage answers with accountID's usage ("": every account's), of
// the key keyID alone unless it is "".
func (a *App) answerUsage(c echo.Context, accountID, keyID string, admin bool) error {
	q, by, err := parseUsageQuery(c.QueryParams(), time.Now(), admin)
	if err != nil {
		return err
	}
	q.AccountID = accountID
	rows, err := a.store.Usage(c.Request().Context(), q)
	if err != nil {
		return a.storeErr("cannot read usage", err)
	}
	if keyID != "" {
		// The ledger's rows are per key already: the account's others go.
		rows = slices.DeleteFunc(rows, func(r store.UsageRow) bool { return r.KeyID != keyID })
	}
	grouped, err := store.GroupUsage(rows, by)
	if err != nil { // parseUsageQuery checked the groupings
		return err
	}
	all, _ := store.GroupUsage(rows, nil)
	v := usageView{From: q.From.Format(store.DayLayout), To: q.To.Format(store.DayLayout), GroupBy: by, Rows: grouped}
	if len(all) == 1 {
		v.Total = all[0].UsageTotals
	}
	if c.QueryParam("format") == "csv" {
		return writeUsageCSV(c, v)
	}
	return c.JSON(http.StatusOK, v)
}

// parseUsageQuery reads from, to and group_by. The range defaults to the
// last 30 days, today (UTC) included; group_by to none (one row, the
// total). An admin may group by account too.
func parseUsageQuery(p map[string][]string, now time.Time, admin bool) (store.UsageQuery, []string, error) {
	get := func(k string) string {
		if v := p[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	bad := func(msg string) error { return newError(http.StatusBadRequest, CodeInvalidRequest, msg) }
	today := now.UTC().Truncate(24 * time.Hour)
	to, from := today, today.AddDate(0, 0, -29)
	var err error
	if s := get("to"); s != "" {
		if to, err = time.Parse(store.DayLayout, s); err != nil {
			return store.UsageQuery{}, nil, bad("to must be a day, YYYY-MM-DD (UTC)")
		}
		from = to.AddDate(0, 0, -29)
	}
	if s := get("from"); s != "" {
		if from, err = time.Parse(store.DayLayout, s); err != nil {
			return store.UsageQuery{}, nil, bad("from must be a day, YYYY-MM-DD (UTC)")
		}
	}
	if from.After(to) {
		return store.UsageQuery{}, nil, bad("from is after to")
	}
	if to.Sub(from) >= usageMaxDays*24*time.Hour {
		return store.UsageQuery{}, nil, bad("the range is over " + strconv.Itoa(usageMaxDays) + " days; ask for less")
	}
	by := []string{}
	if s := get("group_by"); s != "" {
		for _, g := range strings.Split(s, ",") {
			switch g = strings.TrimSpace(g); g {
			case store.GroupByKey, store.GroupByTaskType, store.GroupByDay:
			case store.GroupByAccount:
				if !admin {
					return store.UsageQuery{}, nil, bad("group_by account is the operator's (/admin/api/usage)")
				}
			default:
				return store.UsageQuery{}, nil, bad("group_by takes key, task_type or day, comma-separated")
			}
			by = append(by, g)
		}
	}
	return store.UsageQuery{From: from, To: to}, by, nil
}

// writeUsageCSV answers with the rows as CSV: the grouped-by columns, then
// the totals.
func writeUsageCSV(c echo.Context, v usageView) error {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	h.Set(echo.HeaderContentDisposition, `attachment; filename="usage-`+v.From+`-`+v.To+`.csv"`)
	c.Response().WriteHeader(http.StatusOK)
	w := csv.NewWriter(c.Response())
	cols := map[string]func(store.UsageRow) string{
		store.GroupByAccount:  func(r store.UsageRow) string { return r.AccountID },
		store.GroupByDay:      func(r store.UsageRow) string { return r.Day },
		store.GroupByKey:      func(r store.UsageRow) string { return r.KeyID },
		store.GroupByTaskType: func(r store.UsageRow) string { return r.TaskType },
	}
	names := map[string]string{store.GroupByAccount: "account_id", store.GroupByDay: "day", store.GroupByKey: "key_id", store.GroupByTaskType: "task_type"}
	header := []string{}
	for _, g := range v.GroupBy {
		header = append(header, names[g])
	}
	header = append(header, "requests", "completed", "prompt_tokens", "completion_tokens", "node_ms", "content_bytes", "result_bytes")
	_ = w.Write(header)
	for _, r := range v.Rows {
		rec := []string{}
		for _, g := range v.GroupBy {
			rec = append(rec, csvSafe(cols[g](r)))
		}
		t := r.UsageTotals
		for _, n := range []int64{t.Requests, t.Completed, t.PromptTokens, t.CompletionTokens, t.NodeMs, t.ContentBytes, t.ResultBytes} {
			rec = append(rec, strconv.FormatInt(n, 10))
		}
		_ = w.Write(rec)
	}
	w.Flush()
	return w.Error()
}

// csvSafe keeps a spreadsheet from reading a cell as a formula (task types
// are chosen by nodes, so by anyone with a key).
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
