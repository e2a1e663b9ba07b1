// Package server is the HTTP face of an instance and the owner of every
// component's lifecycle.
//
// It owns:
//   - Config: DefaultConfig (the one place defaults are written; the CLI's
//     flags are bound to it) and Validate, which refuses an unusable
//     configuration at boot with one sentence per problem (config.go);
//   - the App (app.go): New builds the store, the task-record writer and
//     reputation, the webhook dispatcher, the limiter, the bus, the node hub
//     and the task components from the mode (the modes in docs/OPERATIONS.md) and binds the
//     listeners, starting nothing; Run runs every component's Run in one
//     errgroup (lifecycle.go) and serves until its context ends, then
//     drains (invariant 9), ending the components in order, and closes
//     everything;
//   - the cluster wiring (cluster.go): the Redis-backed parts built on the
//     connection bus.DialRedis gives, the registry heartbeat, the
//     single-instance lock, and the Redis watch behind readiness
//     (invariant 10);
//   - what it tells every instance on the control channel (bus.Control, in
//     memory alone, on Redis in a cluster): auth events (authevents.go) and
//     the async pumps' events (async.go), and the figures each instance
//     publishes for the others (bus.Figures: demand.go, overview.go);
//   - the echo routes (routes.go): the client API and its one JSON error
//     shape (errors.go; a task error's status is the one tasks gives it), SSE
//     streams, the OpenAI-compatible endpoints, the node WebSocket accept,
//     API-key authentication with a short cache, rate-limit middleware,
//     /api/health, /livez and /metrics;
//   - POST /api/v1/webhook-secret (webhooks.go), which rotates an account's
//     webhook signing secret; the deliveries are package webhooks';
//   - the operator-only view behind the admin token (admin.go), its
//     overview and the embedded dashboard page (overview.go, dashboard.go);
//   - the operator-only profiling endpoint on its own listener (pprof.go).
//
// It must not hold task or node logic (tasks and nodes do), nor do work
// for a node on a request's context: long-lived work runs under the App's
// root context, in its errgroup. It knows no Redis key, channel or command:
// it passes the Namespace down, and the names live in bus, nodes,
// ratelimit and streamlog (docs/OPERATIONS.md lists them all).
package server
