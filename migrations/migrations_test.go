package migrations

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// Both dialects must carry the same versions, or a deployment that moves
// from SQLite to PostgreSQL (or a test that runs both) sees different schemas.
func TestDialectsAligned(t *testing.T) {
	sqlite := names(t, SQLite())
	pg := names(t, Postgres())
	if len(sqlite) == 0 {
		t.Fatal("no SQLite migrations embedded")
	}
	if !slices.Equal(sqlite, pg) {
		t.Fatalf("migration files differ between dialects:\n sqlite:   %v\n postgres: %v", sqlite, pg)
	}
}

// goose silently treats a file without annotations as an error at run time
// only; catch a missing Up or Down here, where it costs nothing.
func TestAnnotated(t *testing.T) {
	for dialect, fsys := range map[string]fs.FS{"sqlite": SQLite(), "postgres": Postgres()} {
		for _, name := range names(t, fsys) {
			b, err := fs.ReadFile(fsys, name)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"-- +goose Up", "-- +goose Down"} {
				if !strings.Contains(string(b), want) {
					t.Errorf("%s/%s: no %q annotation", dialect, name, want)
				}
			}
		}
	}
}

func names(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	m, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}
