// Package sweep is the sweep profile: for each of its modes in turn, one
// open-loop step per rate against that mode's echo workers, and the rows
// of the report. The modes: nats, an embedded nats-server with
// queue-group subscribers and one shared client connection (nats.go);
// floor, a bare forwarder in a process of this binary between the same
// SDK client and echo nodes as local (floorserver.go, floor.go): what any
// coordinator of this protocol costs on the machine; local, one instance;
// cross, two instances sharing Redis and PostgreSQL, every node on the
// first and every request sent to the second.
//
// A step (step.go) is a warm-up second that is not counted, then
// Duration counted, open loop: request i is due at start + i/rate, goes
// out then from its own goroutine, and its latency counts from the due
// time, so a generator that falls behind shows as latency and as late
// sends rather than as a lighter load (no coordinated omission).
//
// It measures; it must not judge (report.EvaluateSweep does), and the
// nats-server and nats.go it embeds are only the baseline: nothing else of
// the load test depends on them.
package sweep
