package store_test

import (
	"testing"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/store/storetest"
)

func TestSQLiteWebhooks(t *testing.T) {
	storetest.RunWebhooks(t, openSQLite)
}

func TestPostgresWebhooks(t *testing.T) {
	pgtest.BaseURL(t)
	storetest.RunWebhooks(t, openPostgres)
}

// Only a store opened by Open keeps webhooks; a bare double is refused
// with an error, not a nil that would panic later.
func TestWebhooksOfAnotherStore(t *testing.T) {
	var s store.Store
	if _, err := store.Webhooks(s); err == nil {
		t.Fatal("store.Webhooks(nil) did not fail")
	}
}
