package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// classify is the one place that tells the store's absence (retry later),
// its refusal of a record (set it aside) and its other answers apart; the
// Guard's breaker and the Writer both judge by it.
func TestClassify(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	sqliteErr := func(q string) error {
		t.Helper()
		_, err := db.Exec(q)
		if err == nil {
			t.Fatalf("SQLite ran %q", q)
		}
		return err
	}
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, x INTEGER NOT NULL CHECK (x > 0) UNIQUE)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t (x) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	pg := func(code string) error {
		return fmt.Errorf("store: write tasks: %w", &pgconn.PgError{Code: code, Message: "x"})
	}
	for _, c := range []struct {
		name string
		err  error
		want errClass
	}{
		{"index row too big (54000)", pg("54000"), classRefused},
		{"value too long (22001)", pg("22001"), classRefused},
		{"bigint out of range (22003)", pg("22003"), classRefused},
		{"unique violation (23505)", pg("23505"), classRefused},
		{"connection failure (08006)", pg("08006"), classUnavailable},
		{"too many connections (53300)", pg("53300"), classUnavailable},
		{"admin shutdown (57P01)", pg("57P01"), classUnavailable},
		{"I/O error (58030)", pg("58030"), classUnavailable},
		{"undefined table (42P01)", pg("42P01"), classAnswer},
		{"serialization failure (40001)", pg("40001"), classAnswer},
		{"deadlock (40P01)", pg("40P01"), classAnswer},
		{"a refusal the Guard judged unavailable", fmt.Errorf("%w: %w", ErrUnavailable, pg("22001")), classUnavailable},
		{"breaker open", errOpen, classUnavailable},
		{"deadline", fmt.Errorf("store: write tasks: %w", context.DeadlineExceeded), classUnavailable},
		{"no database", errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), classUnavailable},
		{"ErrInvalid", fmt.Errorf("store: task record without an id: %w", ErrInvalid), classRefused},
		{"ErrNotFound", fmt.Errorf("store: task x: %w", ErrNotFound), classAnswer},
		{"SQLite CHECK", sqliteErr(`INSERT INTO t (x) VALUES (-1)`), classRefused},
		{"SQLite NOT NULL", sqliteErr(`INSERT INTO t (x) VALUES (NULL)`), classRefused},
		{"SQLite UNIQUE", sqliteErr(`INSERT INTO t (x) VALUES (1)`), classRefused},
		{"SQLite datatype mismatch", sqliteErr(`INSERT INTO t (id, x) VALUES ('one', 2)`), classRefused},
		{"SQLite string or blob too big", sqliteErr(`INSERT INTO t (x) VALUES (length(zeroblob(2000000000)))`), classRefused},
		{"SQLite no such table", sqliteErr(`INSERT INTO missing VALUES (1)`), classUnavailable},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%s: %v) = %d, want %d", c.name, c.err, got, c.want)
		}
	}
}
