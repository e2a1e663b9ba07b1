// Package idempotency keeps the Idempotency-Key records of the API's task
// routes: which request of a scope (an account) holds a key now, and the
// answer it gave, so that a repeat of the request gets that answer instead
// of running its task again.
//
// It owns:
//   - the Store interface and its two implementations: Memory, for one
//     instance, and Redis, which every instance of a cluster shares (one
//     script per call; a record and its scope's count share the scope's
//     hash tag, so Redis Cluster works);
//   - the lease: a claim lapses unless its holder renews it, so a holder
//     that dies frees the key shortly after, and whoever waits on it is
//     told (ErrReleased) instead of waiting forever;
//   - the bounds: at most Config.MaxKeys keys per scope at once, answers of
//     at most Config.MaxAnswerBytes, a record read back from Redis checked
//     against both before it is used;
//   - the behavioural suite both pass (idempotencytest.Run).
//
// It must not know HTTP, accounts or tasks: the server decides what a
// scope, a key and a fingerprint are, which answers are kept and how a
// replay is written.
package idempotency
