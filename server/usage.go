package server

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
	return a.answerUsage(c, false)
}

// adminUsage is GET /admin/api/usage: every account's, or one's
// (account_id=).
func (a *App) adminUsage(c echo.Context) error {
	return a.answerUsage(c, true)
}

func (a *App) answerUsage(c echo.Context, admin bool) error {
	u, err := parseUsageQuery(c.Request().URL.RawQuery, time.Now(), admin)
	if err != nil {
		return err
	}
	q, keyID := u.q, ""
	if !admin {
		q.AccountID, keyID = accountOf(c).ID, readsKey(accountOf(c))
	}
	rows, err := a.store.Usage(c.Request().Context(), q)
	if err != nil {
		return a.storeErr("cannot read usage", err)
	}
	if keyID != "" {
		// The ledger's rows are per key already: the account's others go.
		rows = slices.DeleteFunc(rows, func(r store.UsageRow) bool { return r.KeyID != keyID })
	}
	grouped, err := store.GroupUsage(rows, u.by)
	if err != nil { // parseUsageQuery checked the groupings
		return err
	}
	all, _ := store.GroupUsage(rows, nil)
	v := usageView{From: q.From.Format(store.DayLayout), To: q.To.Format(store.DayLayout), GroupBy: u.by, Rows: grouped}
	if len(all) == 1 {
		v.Total = all[0].UsageTotals
	}
	if u.csv {
		return writeUsageCSV(c, v)
	}
	return c.JSON(http.StatusOK, v)
}

// usageRequest is a usage query as parseUsageQuery read it.
type usageRequest struct {
	q   store.UsageQuery // AccountID set for an admin's account_id only
	by  []string         // the groupings, each once
	csv bool
}

// maxUsageAccountID bounds an admin's account_id (account ids are UUIDs;
// any id is taken, as a deleted account's usage stays in the ledger).
const maxUsageAccountID = 128

// parseUsageQuery reads a usage route's query: from, to, group_by and
// format (and account_id, an admin's). The range defaults to the last 30
// days, today (UTC) included; group_by to none (one row, the total);
// format to json. An admin may group by account too. What it does not
// know it refuses, naming what it takes, rather than answer as though the
// client had not asked: a misspelt parameter, a format or grouping it
// lacks, a parameter given twice, a grouping named twice (group_by holds
// each at most once, so its size and the answer's are bounded by the
// groupings there are).
func parseUsageQuery(raw string, now time.Time, admin bool) (usageRequest, error) {
	bad := func(msg string) error { return newError(http.StatusBadRequest, CodeInvalidRequest, msg) }
	route, takes, groupings := "/api/v1/usage", "from, to, group_by and format", "key, task_type or day"
	if admin {
		route, takes, groupings = "/admin/api/usage", "from, to, group_by, format and account_id", "account, key, task_type or day"
	}
	p, err := url.ParseQuery(raw)
	if err != nil {
		return usageRequest{}, bad("the query does not parse: separate parameters with & (not ;) and escape % as %25")
	}
	for k, vs := range p {
		switch k {
		case "from", "to", "group_by", "format":
		case "account_id":
			if !admin {
				return usageRequest{}, bad(fmt.Sprintf("unknown parameter %q; %s takes %s", clip(k, 40), route, takes))
			}
		default:
			return usageRequest{}, bad(fmt.Sprintf("unknown parameter %q; %s takes %s", clip(k, 40), route, takes))
		}
		if len(vs) > 1 {
			return usageRequest{}, bad(k + " is given twice; give it once")
		}
	}
	var u usageRequest
	switch p.Get("format") {
	case "", "json":
	case "csv":
		u.csv = true
	default:
		return usageRequest{}, bad("format takes json or csv (default json)")
	}
	if u.q.AccountID = p.Get("account_id"); len(u.q.AccountID) > maxUsageAccountID {
		return usageRequest{}, bad("account_id is longer than " + strconv.Itoa(maxUsageAccountID) + " characters; account ids are UUIDs")
	}

	today := now.UTC().Truncate(24 * time.Hour)
	to, from := today, today.AddDate(0, 0, -29)
	if s := p.Get("to"); s != "" {
		if to, err = time.Parse(store.DayLayout, s); err != nil {
			return usageRequest{}, bad("to must be a day, YYYY-MM-DD (UTC)")
		}
		from = to.AddDate(0, 0, -29)
	}
	if s := p.Get("from"); s != "" {
		if from, err = time.Parse(store.DayLayout, s); err != nil {
			return usageRequest{}, bad("from must be a day, YYYY-MM-DD (UTC)")
		}
	}
	if from.After(to) {
		return usageRequest{}, bad("from is after to")
	}
	if to.Sub(from) >= usageMaxDays*24*time.Hour {
		return usageRequest{}, bad("the range is over " + strconv.Itoa(usageMaxDays) + " days; ask for less")
	}
	u.q.From, u.q.To = from, to

	u.by = []string{}
	if s := p.Get("group_by"); s != "" {
		for g := range strings.SplitSeq(s, ",") {
			switch g = strings.TrimSpace(g); g {
			case store.GroupByKey, store.GroupByTaskType, store.GroupByDay:
			case store.GroupByAccount:
				if !admin {
					return usageRequest{}, bad("group_by account is the operator's (/admin/api/usage)")
				}
			default:
				return usageRequest{}, bad("group_by takes " + groupings + ", comma-separated, each once")
			}
			if slices.Contains(u.by, g) {
				return usageRequest{}, bad("group_by names " + g + " twice; name each grouping once")
			}
			u.by = append(u.by, g)
		}
	}
	return u, nil
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
// are chosen by nodes, so by anyone with a key), as OWASP's CSV injection
// guidance does: a cell starting with = + - @, a tab or a carriage return
// gets a leading '. Spreadsheets also skip, or read as those, more than
// OWASP lists: any leading space (Unicode's too), line feed or other
// control character, format characters (a zero-width space, a byte order
// mark), the full-width and small forms of = + - @ and the minus sign; and
// bytes that are not UTF-8 are whatever the spreadsheet guesses.
func csvSafe(s string) string {
	if s == "" {
		return s
	}
	switch r, _ := utf8.DecodeRuneInString(s); {
	case strings.ContainsRune("=+-@＝＋－＠﹦﹢﹣﹫−", r),
		unicode.IsSpace(r), unicode.IsControl(r), unicode.Is(unicode.Cf, r), r == utf8.RuneError:
		return "'" + s
	}
	return s
}
