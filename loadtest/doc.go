// Command loadtest replays switchyard's scaling profile (seed 002 §4.1) and
// judges it against DESIGN §8's bars; `loadtest --help` explains every
// flag. Its profiles are seed (seed 002 exactly), smoke (the same shape in
// a minute), fleet (DESIGN §8 at fleet scale: 10,000 idle nodes, then
// 100 requests/s) and sweep (issue 13: an open-loop rate sweep against an
// embedded NATS baseline).
//
// It owns the run and its verdict. For each instance count (1, 2, 3) it
// starts that many `switchyard serve` processes on free loopback ports with
// a fresh Redis namespace and PostgreSQL schema, removed afterwards
// (cluster.go), or uses the first N of the --target URLs. With
// --redis-cluster it first starts a Redis Cluster of 3 masters of its own
// for the whole invocation (redis.go, with internal/redistest's NewCluster:
// redis-server processes on free loopback ports, no persistence, stopped
// at exit, also on SIGINT, and dying with this process) and starts every
// instance with --redis-cluster on it. Simulated nodes are Go SDK agents,
// connected at --connect-rate a second, whose handlers wrap
// sdk/handlers.Sleep and tell the ledger which request they run and on
// which instance (fleet.go); the request's content carries its id. Every
// node is an open socket here and on its instance, so the load test raises
// RLIMIT_NOFILE to its hard limit and refuses more nodes than it allows
// (rlimit_unix.go). The runner (load.go) drives a closed-loop ramp, an
// open-loop steady phase with streams alongside, and the fault: kill -9 or
// SIGTERM of one instance, which first leaves the clients' rotation (a
// load balancer's view) and whose nodes then reconnect to the survivors.
// The fleet profile (fleetrun.go) puts an idle window with no requests
// before the steady phase, its loaded window, and measures both from
// their ends minus their starts: each instance's CPU time and RSS from
// /proc, and the commands every Redis server processed (INFO stats); its
// criteria are the idle bars and the loaded window's outcomes
// (fleetreport.go prints them). The ledger (ledger.go) is the one place outcomes are
// written, so that "exactly one outcome per request" is checked, not
// assumed. CPU and RSS come from /proc every second (procstat.go),
// switchyard's own counters from /metrics (metrics.go). After the run,
// fault.go classifies each request by what the fault may do to it,
// report.go computes the figures, criteria.go judges them, and the report is
// written as text, JSON and a self-contained HTML page with SVG plots
// (html.go, svg.go). Exit status: 0 every criterion held, 1 one failed, 2
// the run could not be carried out.
//
// The sweep profile (sweep.go) has a shape of its own. Its modes run one
// after another, each with Nodes echo workers: nats, an embedded
// nats-server with queue-group subscribers and one shared client
// connection (sweepnats.go); local, one instance with SDK nodes running
// sdk/handlers.Echo; cross, two instances sharing Redis and PostgreSQL,
// every node on the first and every request sent to the second. Each mode
// runs one step per rate (sweepstep.go): a second at that rate that is not
// counted, then Duration counted, open loop: request i is due at
// start + i/rate, goes out then from its own goroutine, and its latency
// counts from the due time, so a generator that falls behind shows as
// latency and as late sends rather than as a lighter load (no coordinated
// omission). The echo takes no time, so the latency is the overhead. A
// step's requests may be limited by the nodes' slots (Nodes ×
// NodeConcurrency) rather than by the coordinator: when a step had as
// many requests in flight as there are slots, the report says so.
// sweepreport.go computes the rows (and each mode's knee, the first rate
// whose p99 passes 10 ms) and criteria.go judges issue 13's bars.
//
// It must not look inside an instance: it imports no switchyard package but
// sdk (and internal/redistest, to start a Redis Cluster; nats-server and
// nats.go are only the sweep's baseline), so it sees only
// what a client, a node and an operator see (HTTP, the node WebSocket,
// /metrics, /proc, Redis's INFO), and a verdict cannot rest on the server's
// own account of itself. It must not touch Redis keys or schemas it did not
// create (on a cluster it removes its namespace from every master). Its bars are timings: run it on a machine nothing else
// is loading. docs/OPERATIONS.md shows how to profile its instances while it
// runs.
package main
