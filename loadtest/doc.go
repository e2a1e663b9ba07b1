// Command loadtest replays switchyard's scaling profile (seed 002 §4.1) and
// judges it against DESIGN §8's bars; `loadtest --help` explains every
// flag.
//
// It owns the run and its verdict. For each instance count (1, 2, 3) it
// starts that many `switchyard serve` processes on free loopback ports with
// a fresh Redis namespace and PostgreSQL schema, removed afterwards
// (cluster.go), or uses the first N of the --target URLs. Simulated nodes
// are Go SDK agents whose handlers wrap sdk/handlers.Sleep and tell the
// ledger which request they run and on which instance (fleet.go); the
// request's content carries its id. The runner (load.go) drives a
// closed-loop ramp, an open-loop steady phase with streams alongside, and
// the fault: kill -9 or SIGTERM of one instance, which first leaves the
// clients' rotation (a load balancer's view) and whose nodes then reconnect
// to the survivors. The ledger (ledger.go) is the one place outcomes are
// written, so that "exactly one outcome per request" is checked, not
// assumed. CPU and RSS come from /proc every second (procstat.go),
// switchyard's own counters from /metrics (metrics.go). After the run,
// fault.go classifies each request by what the fault may do to it,
// report.go computes the figures, criteria.go judges them, and the report is
// written as text, JSON and a self-contained HTML page with SVG plots
// (html.go, svg.go). Exit status: 0 every criterion held, 1 one failed, 2
// the run could not be carried out.
//
// It must not look inside an instance: it imports no switchyard package but
// sdk, so it sees only what a client, a node and an operator see (HTTP,
// the node WebSocket, /metrics, /proc), and a verdict cannot rest on the
// server's own account of itself. It must not touch Redis keys or schemas it
// did not create. Its bars are timings: run it on a machine nothing else
// is loading. docs/OPERATIONS.md shows how to profile its instances while it
// runs.
package main
