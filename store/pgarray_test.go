package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
)

// FuzzPgArrays: what pgTextArray and pgTimeArray write, PostgreSQL reads
// back as the same strings and instants (writeTasks' and writeUsage's
// columns), whatever the strings hold once cleanText has run.
func FuzzPgArrays(f *testing.F) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.BaseURL(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close(ctx) })
	for _, s := range [][2]string{
		{`a"b`, `c\d`}, {"", "NULL"}, {"{}", `{"x"}`}, {",", " spaced "}, {"é😀", `\"`},
		{"\t\n\r", "\x00\xff"}, {`\`, `"`}, {"null", "a,b}"},
	} {
		f.Add(s[0], s[1], int64(1764988800123456), false)
	}
	f.Add("x", "y", int64(-62135596800000000), true) // 0001-01-01
	f.Fuzz(func(t *testing.T, a, b string, usec int64, null bool) {
		strs := []string{cleanText(a), cleanText(b)}
		at := time.UnixMicro(usec).UTC()
		if y := at.Year(); y < 1 || y > 9999 { // RFC 3339's years, and a task's
			t.Skip()
		}
		opt := []*time.Time{&at, nil}
		if null {
			opt = []*time.Time{nil, &at}
		}
		var gotT []time.Time
		var gotOpt []*time.Time
		// writeTasks' node_ids: a literal inside a literal, cast per row.
		nested := pgTextArray([]string{pgTextArray(strs), pgTextArray(nil)})
		var gotS, gotInner, gotEmpty []string
		err := conn.QueryRow(ctx, "SELECT $1::text[], $2::timestamptz[], $3::timestamptz[], (u.n[1])::text[], (u.n[2])::text[] FROM (SELECT $4::text[] AS n) u",
			pgTextArray(strs), pgTimeArray([]time.Time{at, at}), pgOptTimeArray(opt), nested).Scan(&gotS, &gotT, &gotOpt, &gotInner, &gotEmpty)
		if err != nil {
			t.Fatalf("%q: %v", strs, err)
		}
		if !slices.Equal(gotS, strs) {
			t.Errorf("text[] %s read back as %q, want %q", pgTextArray(strs), gotS, strs)
		}
		if !slices.Equal(gotInner, strs) || gotEmpty == nil || len(gotEmpty) != 0 {
			t.Errorf("nested text[] %s read back as %q and %q, want %q and an empty array", nested, gotInner, gotEmpty, strs)
		}
		if len(gotT) != 2 || !gotT[0].Equal(at) || !gotT[1].Equal(at) {
			t.Errorf("timestamptz[] %s read back as %v, want %v twice", pgTimeArray([]time.Time{at, at}), gotT, at)
		}
		if len(gotOpt) != 2 || (gotOpt[0] == nil) != (opt[0] == nil) || (gotOpt[1] == nil) != (opt[1] == nil) ||
			slices.ContainsFunc(gotOpt, func(p *time.Time) bool { return p != nil && !p.Equal(at) }) {
			t.Errorf("timestamptz[] %s read back as %v", pgOptTimeArray(opt), gotOpt)
		}
	})
}

// One allocation a column, whatever its length: the reason for pgarray.go.
func TestPgArraysAllocateOnce(t *testing.T) {
	strs := slices.Repeat([]string{`task "7" \ done`}, 64)
	times := slices.Repeat([]time.Time{time.Now()}, 64)
	if n := testing.AllocsPerRun(100, func() { pgTextArray(strs) }); n != 1 {
		t.Errorf("pgTextArray of 64 strings: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { pgTimeArray(times) }); n > 2 {
		t.Errorf("pgTimeArray of 64 times: %v allocations, want at most 2 (the builder and its buffer)", n)
	}
}
