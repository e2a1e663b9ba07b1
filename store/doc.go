// Package store is switchyard's persistence.
//
// It owns:
//   - the Store interface — accounts and their API keys, records of finished
//     tasks and the usage ledger they and the nodes' usage reports add to
//     (usage.go), ratings, the
//     per-node counters reputation is computed from, suspensions, the nodes
//     seen and their benchmark profiles — and its one implementation
//     (sqlstore.go: accounts.go, tasks.go, usage.go, nodes.go, async.go,
//     webhooks.go), written once for the embedded SQLite default (a file in
//     the data directory, no configuration) and PostgreSQL for a cluster:
//     what the two spell differently is in dialect.go, how each is reached in
//     sqlite.go (database/sql) and postgres.go (pgx's pool); held to one
//     behavioural suite (storetest) and to shared rules (rules.go);
//   - WebhookStore (webhooks.go), the outbox of webhook deliveries and the
//     accounts' signing secrets, kept apart from Store's own calls and
//     reached with st.Webhooks(), under the same Guard;
//   - Open, which picks the database from Options, and Migrate: the
//     embedded migrations (package migrations) applied with goose, under a
//     PostgreSQL session lock so that instances booting together do not race;
//   - the two components the request path uses without waiting on a
//     database: Writer, which batches task records, node outcomes and usage
//     reports off the
//     hot path in a bounded buffer (what overflows is counted and dropped,
//     never blocks a request; a record the database refuses is set aside in
//     dead_letters, deadletters.go, and the rest written; the end of its Run
//     flushes what is pending), and Reputation,
//     an in-memory cache of node scores that routing reads on every pick.
//
// It must not touch HTTP, sockets or Redis: callers map its sentinel errors
// (ErrNotFound, ErrConflict, ErrInvalid, ...) to statuses, and cluster state
// lives in bus and nodes. API keys exist in plain text only in what
// CreateAccount and CreateKey return; the package stores and logs nothing but
// their SHA-256 and prefix.
package store
