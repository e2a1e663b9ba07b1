package store

import (
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Until the async queue and the webhook outbox are folded into sqlStore.

type pgStore struct {
	*sqlStore
	pool *pgxpool.Pool
}

type sqliteStore struct {
	*sqlStore
	db *sql.DB
}

var (
	_ Store = (*pgStore)(nil)
	_ Store = (*sqliteStore)(nil)
)

func isPGUnique(err error) bool     { return postgresDialect.isUnique(err) }
func isSQLiteUnique(err error) bool { return sqliteDialect.isUnique(err) }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	return timePtr(t.UTC())
}

func micro(t time.Time) int64 { return dbTime(t).UnixMicro() }

func fromMicro(v int64) time.Time { return time.UnixMicro(v).UTC() }
