// Package load runs an invocation of the load test: Run validates its
// configuration, raises the open-file limit, builds switchyard (unless
// given a binary), starts the Redis Cluster of --redis-cluster, then runs
// the sweep profile (the sweep package) or, for each instance count in
// turn, one run, and judges them (the report package).
//
// A run (run.go) starts its cluster (or uses the targets), connects the
// simulated nodes, and drives them (runner.go): a closed-loop ramp, an
// open-loop steady phase with streams alongside, and the fault (fault.go):
// kill -9 or SIGTERM of one instance, which first leaves the clients'
// rotation (a load balancer's view) and whose nodes then reconnect to the
// survivors. The fleet profile (fleetrun.go) puts an idle window with no
// requests before the steady phase, its loaded window, and measures both
// from their ends minus their starts: each instance's CPU time and RSS,
// and the commands every Redis server processed.
//
// It generates the load and records what happened, in the ledger and the
// report's types; it must not judge or format a figure (the report does),
// nor reach an instance other than as a client, a node (the fleet
// package) or an operator (the cluster package) would.
package load
