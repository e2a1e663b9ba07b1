// Command loadtest replays switchyard's scaling profile and judges it
// against our bars; `loadtest --help` explains every flag. Its profiles
// are seed (the scaling profile exactly), smoke (the same shape in a
// minute), fleet (the same bars at fleet scale: 10,000 idle nodes, then
// 100 requests/s) and sweep (an open-loop rate sweep against an embedded
// NATS baseline); docs/BENCHMARKS.md has their runs.
//
// This package is the command only: flags (flags.go, bound to the
// chosen profile's defaults) → config → a context cancelled on SIGINT and
// SIGTERM → load.Run → the reports → the exit status: 0 every criterion
// held, 1 one failed, 2 the run could not be carried out. The same binary
// also runs as the fleet profile's helper processes (`loadtest
// fleet-helper`) and as the sweep's floor server (`loadtest
// floor-server`), started by the load test itself. The work is in
// internal/: config (the configuration and its validation), load (the
// runs and the generator), sweep (the sweep profile), fleet (the simulated
// nodes), cluster (the processes: instances, builds, /proc, Redis),
// ledger (every request's one outcome), report (figures, criteria,
// text, JSON and HTML), and the leaves stats, svg and live.
//
// It must not look inside an instance: it imports no switchyard package
// but sdk (and internal/redistest, to start a Redis Cluster; nats-server
// and nats.go are only the sweep's baseline), so it sees only what a
// client, a node and an operator see (HTTP, the node WebSocket, /metrics,
// /proc, Redis's INFO), and a verdict cannot rest on the server's own
// account of itself. It must not touch Redis keys or schemas it did not
// create. Its bars are timings: run it on a machine nothing else is
// loading. docs/OPERATIONS.md shows how to profile its instances while it
// runs.
package main
