// Package cluster is the processes of a run and what the load test reads
// of them from outside: the switchyard instances it starts on free
// loopback ports (each run with a fresh Redis namespace and PostgreSQL
// schema, removed afterwards) or the --target instances it is given; the
// Redis Cluster of --redis-cluster; the binaries it builds
// (./cmd/switchyard of the root module, the load test itself) and the
// children it starts of its own binary (StartChild); each process's CPU
// and RSS from /proc (procstat.go), an instance's counters from /metrics
// (metrics.go), Redis's command counts from INFO (redis.go); and the
// open-file limit every node socket counts against (rlimit_unix.go).
//
// It must not look inside an instance: it imports no switchyard package
// but sdk (and internal/redistest, to start a Redis Cluster), so it sees
// only what a client, a node and an operator see. It must not touch Redis
// keys or schemas it did not create (on a cluster it removes its
// namespace from every master). It neither generates load nor judges it.
package cluster
