package store

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"
)

// Kinds of dead letters: what the Writer was writing when the store refused
// one record of it (the kind label of its metrics, too).
const (
	KindTask       = "task"
	KindOutcome    = "outcome"
	KindUsage      = "usage"
	KindSuspension = "suspension"
)

// Bounds of a stored dead letter. A dead letter is written because the
// store refused something, so it must itself never be refused: each field
// is cut to a bound far below any limit either database has, and only the
// id is indexed.
const (
	// DeadLetterRecordMax is how much of a record's JSON is kept: a
	// normal record whole (about 400 bytes), a monstrous one's start;
	// RecordBytes says how long it was.
	DeadLetterRecordMax = 4096
	deadLetterIDMax     = 256  // TaskID, AccountID
	deadLetterErrorMax  = 2048 // Error
	// DeadLettersKept is how many dead letters the table keeps: each write
	// deletes the oldest beyond it, so that records refused at request
	// rate cannot fill the database's disk (about 7 KiB a row at most).
	// The metric switchyard_store_dead_letters_total counts them all.
	DeadLettersKept = 10000
)

// DeadLetter is a record the store refused, set aside by the Writer so that
// it holds up nothing (invariant 17: no record blocks the others), and kept
// for an operator in the dead_letters table.
type DeadLetter struct {
	ID        int64     `json:"id"`   // given by the store
	Kind      string    `json:"kind"` // KindTask, KindOutcome, KindUsage or KindSuspension
	TaskID    string    `json:"task_id,omitempty"`
	AccountID string    `json:"account_id,omitempty"`
	Error     string    `json:"error"` // the store's refusal
	At        time.Time `json:"at"`
	// Record is the record as JSON, its first DeadLetterRecordMax bytes
	// (cut at a character, so no longer valid JSON) when it was longer;
	// RecordBytes is its whole length.
	Record      string `json:"record"`
	RecordBytes int64  `json:"record_bytes"`
}

// cut returns s (cleaned as cleanText does) shortened to at most n bytes at
// a character boundary: a cut in the middle of a character would be
// invalid UTF-8, which PostgreSQL refuses.
func cut(s string, n int) string {
	s = cleanText(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// bounded returns d as it is stored: every field within its bound.
func (d DeadLetter) bounded() DeadLetter {
	if d.RecordBytes < int64(len(d.Record)) {
		d.RecordBytes = int64(len(d.Record))
	}
	d.Kind = cut(d.Kind, 32)
	d.TaskID, d.AccountID = cut(d.TaskID, deadLetterIDMax), cut(d.AccountID, deadLetterIDMax)
	d.Error = cut(d.Error, deadLetterErrorMax)
	d.Record = cut(d.Record, DeadLetterRecordMax)
	if d.At.IsZero() {
		d.At = time.Now()
	}
	return d
}

func (s *sqlStore) WriteDeadLetters(ctx context.Context, dls []DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	return wrapErr("write dead letters", s.db.inTx(ctx, func(tx querier) error {
		for _, d := range dls {
			d = d.bounded()
			if _, err := tx.exec(ctx, `INSERT INTO dead_letters (kind, task_id, account_id, error, created_at, record, record_bytes)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, d.Kind, d.TaskID, d.AccountID, d.Error, dbTime(d.At), d.Record, d.RecordBytes); err != nil {
				return err
			}
		}
		// The id of the newest row beyond the bound, through the primary
		// key: no scan of the table.
		_, err := tx.exec(ctx, `DELETE FROM dead_letters WHERE id <= (SELECT id FROM dead_letters ORDER BY id DESC LIMIT 1 OFFSET $1)`,
			DeadLettersKept)
		return err
	}))
}

func (s *sqlStore) DeadLetters(ctx context.Context, limit int) ([]DeadLetter, int64, error) {
	if limit <= 0 {
		return nil, 0, fmt.Errorf("store: dead letters: a limit of %d (want 1 or more): %w", limit, ErrInvalid)
	}
	var total int64
	if err := s.db.queryRow(ctx, `SELECT count(*) FROM dead_letters`).Scan(&total); err != nil {
		return nil, 0, wrapErr("dead letters", err)
	}
	out, err := collect(ctx, s.db, func(r row, d *DeadLetter) error {
		return r.Scan(&d.ID, &d.Kind, &d.TaskID, &d.AccountID, &d.Error, (*timeCol)(&d.At), &d.Record, &d.RecordBytes)
	}, `SELECT id, kind, task_id, account_id, error, created_at, record, record_bytes
		FROM dead_letters ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, 0, wrapErr("dead letters", err)
	}
	if out == nil {
		out = []DeadLetter{}
	}
	return out, total, nil
}
