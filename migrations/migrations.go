package migrations

import (
	"embed"
	"io/fs"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// SQLite returns the migrations for SQLite, rooted so that goose sees the
// .sql files at the top level.
func SQLite() fs.FS { return sub("sqlite") }

// Postgres returns the migrations for PostgreSQL, rooted like SQLite's.
func Postgres() fs.FS { return sub("postgres") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		// fs.Sub fails only for an invalid path, and dir is one of two
		// constants matched by the embed pattern above.
		panic("migrations: " + err.Error())
	}
	return f
}
