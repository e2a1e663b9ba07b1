package store

import (
	"database/sql"
	"errors"
	"fmt"
)

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
