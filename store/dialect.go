package store

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The store's SQL is written once, for both databases: placeholders are
// $1, $2, ... (PostgreSQL's, which SQLite also reads as numbered
// parameters); times are bound as time.Time (pgx writes a timestamptz, and
// the SQLite connection is opened with _time_integer_format=unix_micro, the
// INTEGER unix microseconds its schema stores) and read back through
// timeCol. What the two still write differently is in a dialect, below,
// side by side.

// dialect is what PostgreSQL and SQLite spell differently.
type dialect struct {
	// isUnique reports whether err is a unique violation (a duplicate key).
	isUnique func(error) bool

	// forShare and forUpdate end a SELECT, in a transaction, that locks
	// the rows it reads; skipLocked one that passes over rows another
	// transaction has locked (a queue's claim). SQLite has no row locks:
	// a writing transaction holds the whole file from BEGIN
	// (_txlock=immediate), so it needs none.
	forShare, forUpdate, skipLocked string

	// now is the current time in SQL. PostgreSQL's clock is the database's,
	// so that the leases of instances whose clocks differ compare alike;
	// SQLite's (one process) is the process's, bound by withNow as :now.
	now string
	// withNow appends what now needs to a statement's arguments.
	withNow func(args []any) []any
	// addMicros is the SQL for the time t plus us microseconds (both SQL
	// expressions).
	addMicros func(t, us string) string

	// trueLit is the literal that matches a partial index's boolean predicate
	// (SQLite's planner matches "= 1", not "= true").
	trueLit string
	// nodeIDs reads tasks.node_ids as a JSON array of strings: PostgreSQL
	// keeps a text[], SQLite the JSON itself.
	nodeIDs string
	// in is the condition "col is one of vals", with its placeholders
	// numbered from $n, and their arguments.
	in func(col string, n int, vals []string) (string, []any)
	// maxIn bounds the values of one in (0: no bound).
	maxIn int
}

var postgresDialect = &dialect{
	isUnique: func(err error) bool {
		var e *pgconn.PgError
		return errors.As(err, &e) && e.Code == "23505"
	},
	forShare:   ` FOR SHARE`,
	forUpdate:  ` FOR UPDATE`,
	skipLocked: ` FOR UPDATE SKIP LOCKED`,
	now:        `now()`,
	withNow:    func(args []any) []any { return args },
	addMicros:  func(t, us string) string { return t + ` + (` + us + `) * interval '1 microsecond'` },
	trueLit:    `true`,
	nodeIDs:    `array_to_json(node_ids)::text`,
	// One array parameter: the statement's text, and so its prepared
	// plan, is the same whatever the number of values.
	in: func(col string, n int, vals []string) (string, []any) {
		return col + ` = ANY($` + strconv.Itoa(n) + `)`, []any{nonNil(vals)}
	},
}

var sqliteDialect = &dialect{
	isUnique: func(err error) bool {
		var e *sqlite.Error
		return errors.As(err, &e) && (e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
	},
	now: `:now`,
	withNow: func(args []any) []any {
		return append(args, sql.Named("now", dbTime(time.Now())))
	},
	addMicros: func(t, us string) string { return t + ` + (` + us + `)` },
	trueLit:   `1`,
	nodeIDs:   `node_ids`,
	// SQLite takes an empty list ("IN ()") and matches nothing.
	in: func(col string, n int, vals []string) (string, []any) {
		marks := make([]string, len(vals))
		args := make([]any, len(vals))
		for i, v := range vals {
			marks[i], args[i] = `$`+strconv.Itoa(n+i), v
		}
		return col + ` IN (` + strings.Join(marks, `, `) + `)`, args
	},
	// Bounded lists stay far below SQLite's limit on parameters.
	maxIn: 500,
}

// timeCol reads a stored time, NULL as the zero time, in either dialect: a
// timestamptz through pgx, or SQLite's INTEGER unix microseconds through
// database/sql. Scan into (*timeCol)(&t).
type timeCol time.Time

func (c *timeCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c = timeCol{}
	case int64:
		*c = timeCol(time.UnixMicro(v).UTC())
	default:
		return fmt.Errorf("store: cannot read a %T as a time", src)
	}
	return nil
}

func (c *timeCol) ScanTimestamptz(v pgtype.Timestamptz) error {
	*c = timeCol{}
	if v.Valid {
		*c = timeCol(v.Time.UTC())
	}
	return nil
}

// optTimeCol reads a stored time into a *time.Time, NULL as nil.
type optTimeCol struct{ p **time.Time }

func (c optTimeCol) Scan(src any) error {
	var t timeCol
	if err := t.Scan(src); err != nil {
		return err
	}
	*c.p = optTime(time.Time(t))
	return nil
}

func (c optTimeCol) ScanTimestamptz(v pgtype.Timestamptz) error {
	var t timeCol
	t.ScanTimestamptz(v)
	*c.p = optTime(time.Time(t))
	return nil
}

// optTime is nil for the zero time (stored as NULL), else a pointer to t.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	p := t // only a time that is set goes to the heap
	return &p
}
