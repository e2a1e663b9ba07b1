package store

import (
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Until the webhook outbox is folded into sqlStore.

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

func micro(t time.Time) int64 { return dbTime(t).UnixMicro() }

func fromMicro(v int64) time.Time { return time.UnixMicro(v).UTC() }
