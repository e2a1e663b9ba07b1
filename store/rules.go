package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The rules both dialects share, so that SQLite and PostgreSQL cannot drift
// apart on what a rating or an outcome means.

// dbTime is the form in which every time is stored: UTC, to the microsecond
// (PostgreSQL's precision), so that what is read back equals what the other
// dialect would return.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func checkRating(rating int) error {
	if rating < 1 || rating > 5 {
		return fmt.Errorf("store: rating %d is not between 1 and 5: %w", rating, ErrInvalid)
	}
	return nil
}

// rateTarget is what Rate needs to know about a task to apply GemmaNet's rules.
type rateTarget struct {
	AccountID  string
	FinishedAt time.Time
	NodeIDs    []string
}

// checkRate applies the rules that do not need the ratings table, in the
// order a client can act on: a task it cannot rate at all (not found, not
// its own, nothing to rate) before one it was merely too late for.
func checkRate(taskID string, t rateTarget, accountID string, now time.Time) error {
	if t.AccountID != accountID {
		return fmt.Errorf("store: task %s was requested by another account: %w", taskID, ErrForbidden)
	}
	if len(t.NodeIDs) == 0 {
		// An error before any node was assigned, or a cancel: no node to rate.
		return fmt.Errorf("store: task %s was served by no node: %w", taskID, ErrNotFound)
	}
	if now.After(t.FinishedAt.Add(RatingWindow)) {
		return fmt.Errorf("store: task %s finished more than %s ago: %w", taskID, RatingWindow, ErrExpired)
	}
	return nil
}

// nodeDelta is the sum of a batch of outcomes for one node.
type nodeDelta struct {
	NodeID     string
	Tasks      int64
	Successful int64
	Ms         int64
	LastAt     time.Time // zero when no outcome carried a time
}

// aggregateOutcomes folds a batch into one delta per node, sorted by node id
// so that concurrent transactions lock node rows in the same order and cannot
// deadlock.
func aggregateOutcomes(outs []Outcome) []nodeDelta {
	idx := make(map[string]int, len(outs))
	var ds []nodeDelta
	for _, o := range outs {
		i, ok := idx[o.NodeID]
		if !ok {
			i = len(ds)
			idx[o.NodeID] = i
			ds = append(ds, nodeDelta{NodeID: o.NodeID})
		}
		d := &ds[i]
		d.Tasks++
		if o.Success {
			d.Successful++
		}
		d.Ms += o.ElapsedMs
		if o.At.After(d.LastAt) {
			d.LastAt = o.At
		}
	}
	slices.SortFunc(ds, func(a, b nodeDelta) int {
		switch {
		case a.NodeID < b.NodeID:
			return -1
		case a.NodeID > b.NodeID:
			return 1
		}
		return 0
	})
	return ds
}

// applyOutcome adds one outcome to a node's counters exactly as
// ApplyOutcomes does in SQL; the reputation cache uses it for deltas that
// have not reached the database yet.
func applyOutcome(s *NodeStats, o Outcome) {
	s.TotalTasks++
	if o.Success {
		s.SuccessfulTasks++
	}
	s.TotalMs += o.ElapsedMs
	if !o.At.IsZero() && (s.LastTaskAt == nil || o.At.After(*s.LastTaskAt)) {
		at := dbTime(o.At)
		s.LastTaskAt = &at
	}
}

func checkOutcomes(outs []Outcome) error {
	for _, o := range outs {
		if o.NodeID == "" {
			return fmt.Errorf("store: outcome without a node id: %w", ErrInvalid)
		}
	}
	return nil
}

func checkTasks(recs []TaskRecord) error {
	for _, r := range recs {
		if r.ID == "" {
			return fmt.Errorf("store: task record without an id: %w", ErrInvalid)
		}
	}
	return nil
}

func checkReports(reps []UsageReport) error {
	for _, r := range reps {
		if r.TaskID == "" || r.NodeID == "" {
			return fmt.Errorf("store: usage report without a task id or a node id: %w", ErrInvalid)
		}
	}
	return nil
}

// sortedUnique returns the distinct non-empty ids in ascending order (lock
// order, see aggregateOutcomes).
func sortedUnique(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id != "" {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func timePtr(t time.Time) *time.Time { return &t }

// cleanText makes a string storable in both dialects: PostgreSQL refuses
// NUL bytes and invalid UTF-8 in text, and a task record that could never be
// written would otherwise hold up every batch behind it.
func cleanText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// cleanRecord applies cleanText to a record's strings, identically in both
// dialects so that they store the same thing.
func cleanRecord(r TaskRecord) TaskRecord {
	r.ID, r.AccountID, r.KeyID, r.TaskType = cleanText(r.ID), cleanText(r.AccountID), cleanText(r.KeyID), cleanText(r.TaskType)
	r.Status, r.ErrorCode = cleanText(r.Status), cleanText(r.ErrorCode)
	r.Requester, r.Owner = cleanText(r.Requester), cleanText(r.Owner)
	if r.NodeIDs != nil {
		ids := make([]string, len(r.NodeIDs))
		for i, id := range r.NodeIDs {
			ids[i] = cleanText(id)
		}
		r.NodeIDs = ids
	}
	if r.Retries != nil {
		rs := make([]Retry, len(r.Retries))
		for i, x := range r.Retries {
			rs[i] = Retry{NodeID: cleanText(x.NodeID), Reason: cleanText(x.Reason), LostMs: x.LostMs, ResumedBytes: x.ResumedBytes}
		}
		r.Retries = rs
	}
	return r
}

// encodeRetries is the tasks.retries column: ” for a task run once.
func encodeRetries(rs []Retry) string {
	if len(rs) == 0 {
		return ""
	}
	b, err := json.Marshal(rs)
	if err != nil { // two strings each: cannot fail
		panic("store: retries: " + err.Error())
	}
	return string(b)
}

// decodeRetries reads the tasks.retries column; nil for ”.
func decodeRetries(s string) ([]Retry, error) {
	if s == "" {
		return nil, nil
	}
	var rs []Retry
	err := json.Unmarshal([]byte(s), &rs)
	return rs, err
}

// cleanReport applies cleanText to a report's strings (see cleanRecord).
func cleanReport(r UsageReport) UsageReport {
	r.TaskID, r.NodeID, r.AccountID = cleanText(r.TaskID), cleanText(r.NodeID), cleanText(r.AccountID)
	r.KeyID, r.TaskType = cleanText(r.KeyID), cleanText(r.TaskType)
	return r
}

// checkText refuses what cleanText would have to change, for values a
// person chose (account names, emails), where silently altering is worse
// than saying no.
func checkText(field, s string) error {
	if cleanText(s) != s {
		return fmt.Errorf("store: %s contains a NUL byte or invalid UTF-8: %w", field, ErrInvalid)
	}
	return nil
}

// checkAccount validates CreateAccount's arguments and fills the trust default.
func checkAccount(name, email, trust string) (string, error) {
	trust, err := normTrust(trust)
	if err != nil {
		return "", err
	}
	if name == "" {
		return "", fmt.Errorf("store: account name is empty: %w", ErrInvalid)
	}
	if err := checkText("account name", name); err != nil {
		return "", err
	}
	if err := checkText("email", email); err != nil {
		return "", err
	}
	return trust, nil
}
