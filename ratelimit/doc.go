// Package ratelimit counts events per key with GCRA and refuses those over a
// Limit: the Limiter interface, an in-process implementation (Memory) for a
// single instance, a Redis one (via redis_rate) whose budgets are shared by
// every instance of a cluster (DESIGN.md §5, invariant 8), and the echo
// middleware that applies a Limit to routes and sets the X-RateLimit-* and
// Retry-After headers.
//
// Both implementations run the same arithmetic (redis_rate v10's script) and
// pass one behavioural suite, ratelimittest.Run. The caller names the keys
// (the middleware uses "rule:key"); this package adds only its prefix.
//
// It must not know about accounts, tasks or nodes, nor import any other
// switchyard package: the server decides what a key is and what a 429 body
// looks like.
package ratelimit
