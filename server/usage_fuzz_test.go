package server

import (
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// A usage query comes from anyone with a key: none may panic its parser,
// one it refuses is a 400, and one it takes groups by known groupings, each
// once (so at most four), over a range of at most usageMaxDays.
func FuzzUsageQuery(f *testing.F) {
	for _, s := range []string{
		"", "group_by=key,task_type,day&format=csv", "group_by=key;drop", "format=xml", "group_by=key,key",
		"from=2026-01-01&to=2026-03-01", "account_id=a&group_by=account", "%zz", "a=1&a=2", "group_by=%20day,%09key",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	now := time.Date(2026, 3, 10, 15, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw string, admin bool) {
		u, err := parseUsageQuery(raw, now, admin)
		if err != nil {
			if ae := (*apiError)(nil); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
				t.Fatalf("?%q: %v, not a 400", raw, err)
			}
			return
		}
		for i, g := range u.by {
			known := g == store.GroupByKey || g == store.GroupByTaskType || g == store.GroupByDay || (admin && g == store.GroupByAccount)
			if !known || slices.Contains(u.by[:i], g) {
				t.Fatalf("?%q (admin %v): group_by %q", raw, admin, u.by)
			}
		}
		if u.q.From.After(u.q.To) || u.q.To.Sub(u.q.From) >= usageMaxDays*24*time.Hour {
			t.Fatalf("?%q: the range %s to %s", raw, u.q.From, u.q.To)
		}
		if !admin && u.q.AccountID != "" {
			t.Fatalf("?%q: a client's query names account %q", raw, u.q.AccountID)
		}
	})
}
