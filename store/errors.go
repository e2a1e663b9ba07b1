package store

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// errClass is what a store error says about the store and about what it
// was given.
type errClass int

const (
	// classAnswer: the store answered (not found, a conflict, a query it
	// could not run); trying again later may or may not succeed.
	classAnswer errClass = iota
	// classRefused: the store answered that it will not take the data it
	// was given: a value too big for an index (PostgreSQL's 8191 bytes), out
	// of range, or against a constraint. The same data is refused again,
	// whenever it is sent, so the writer sets the record aside (invariant
	// 17) instead of retrying it.
	classRefused
	// classUnavailable: the store could not answer (a deadline, a
	// connection, the breaker open, a database shutting down or out of
	// resources). The Guard's breaker counts these; the writer keeps its
	// batch and tries again.
	classUnavailable
)

// classify sorts a store error; the Guard (answered) and the writer
// (refused) both judge by it. PostgreSQL's classes: 08 connection, 53
// insufficient resources, 57 operator intervention (shutdown, startup) and
// 58 system errors mean it could not serve; 22 data exceptions, 23
// integrity constraint violations and 54 program limits ("index row
// requires 9080 bytes, maximum size is 8191") are the data's fault. SQLite's
// equivalents of the data's fault are a constraint (CHECK, NOT NULL, a
// trigger's RAISE), a string or blob over its length limit, and a type
// mismatch; any other SQLite error is the file's (busy, locked, I/O, full)
// and counts as unavailable. ErrInvalid is the store's own refusal of a
// value.
func classify(err error) errClass {
	if errors.Is(err, ErrUnavailable) {
		return classUnavailable // the Guard has judged already
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:min(2, len(pe.Code))] {
		case "08", "53", "57", "58":
			return classUnavailable
		case "22", "23", "54":
			return classRefused
		}
		return classAnswer
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH:
			return classRefused
		}
		return classUnavailable
	}
	switch {
	case errors.Is(err, ErrInvalid):
		return classRefused
	case isKind(err):
		return classAnswer
	}
	return classUnavailable
}

// refused reports whether err is the store's refusal of the data it was
// given (classRefused).
func refused(err error) bool { return err != nil && classify(err) == classRefused }

// isKind reports whether err already carries one of the sentinels, and with
// them its "store: ..." message, which needs no second prefix.
func isKind(err error) bool {
	for _, k := range []error{ErrNotFound, ErrForbidden, ErrConflict, ErrExpired, ErrInvalid} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// wrapErr prefixes a database error with the operation that failed.
func wrapErr(op string, err error) error {
	if err == nil || isKind(err) {
		return err
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

// notFound turns "no rows" into ErrNotFound naming what was looked for
// (pgx.ErrNoRows also matches sql.ErrNoRows).
func notFound(err error, format string, args ...any) error {
	if err == nil || isKind(err) {
		return err
	}
	what := fmt.Sprintf(format, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("store: %s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("store: %s: %w", what, err)
}

// oneKey checks that RevokeKey's argument matched exactly one key: a prefix
// has only 32 bits, so two keys can share one, and revoking either on a guess
// would be worse than asking for the id.
func oneKey(idOrPrefix string, ids []string) error {
	switch len(ids) {
	case 0:
		return fmt.Errorf("store: no key with id or prefix %q: %w", idOrPrefix, ErrNotFound)
	case 1:
		return nil
	}
	return fmt.Errorf("store: prefix %q matches %d keys: name the key by its key id instead: %w", idOrPrefix, len(ids), ErrConflict)
}

// revokeHash lets RevokeKey also accept a whole key, pasted by an operator
// who has nothing else; for anything else it returns a value no hash equals.
func revokeHash(s string) string {
	if looksLikeKey(s) {
		return hashKey(s)
	}
	return "-"
}

func nonNil(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
