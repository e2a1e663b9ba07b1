// Package store is switchyard's persistence: accounts and their API keys,
// records of finished tasks, ratings, and the per-node counters that
// reputation is computed from. Two implementations sit behind the Store
// interface — the embedded SQLite default (a file in the data directory, no
// configuration) and PostgreSQL for a cluster — and one behavioural suite
// (storetest) runs against both. Open picks one from Options and brings its
// schema up to date with the embedded migrations.
//
// Around the Store it provides the two components the request path uses:
// Writer, which batches task records and node outcomes off the hot path with
// a bounded buffer, and Reputation, an in-memory cache of node scores that
// routing reads thousands of times a second without touching the database.
//
// It must not touch HTTP, sockets or Redis: callers translate its sentinel
// errors (ErrNotFound, ErrForbidden, ...) into statuses, and cluster state
// lives elsewhere. API keys exist in plain text only in the return value of
// CreateAccount and CreateKey; the package stores and logs nothing but their
// SHA-256 and prefix.
package store
