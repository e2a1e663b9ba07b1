// Package ratelimit counts events per key with GCRA and refuses those over a
// Limit (invariant 8).
//
// It owns:
//   - the Limiter interface and its two implementations: Memory, for one
//     instance (a map and a janitor goroutine that Close stops), and Redis,
//     whose budgets every instance of a cluster shares (redis_rate v10's
//     script, clocked by Redis TIME);
//   - the arithmetic both run (gcra.go, the script's own, in integer
//     nanoseconds) and the one behavioural suite both pass
//     (ratelimittest.Run);
//   - the echo middleware that applies a Limit to routes, sets the
//     X-RateLimit-* and Retry-After headers, and lets a request through when
//     the limiter itself fails (an outage of the limiter must not become an
//     outage of the API); and its decision metrics.
//
// The caller names the keys: the middleware uses "rule:key", the caller
// gives Redis its prefix (the server passes "{ns}:rl:"), and redis_rate
// stores each at "rate:" + prefix + key. This package adds nothing else.
//
// It must not know accounts, tasks or nodes, nor import any other
// switchyard package: the server decides what a key is and what a 429 body
// looks like.
package ratelimit
