// Package streamlog keeps the chunks of resumable streams: per
// task, an append-only log of chunks numbered 1, 2, 3…, closed by one end
// entry that carries the task's final JSON, kept for the task's lifetime
// plus a grace period. A reader replays what follows a given number and
// then follows the log live until its end, with no entry lost or repeated
// between the two, so a client cut off mid-stream resumes from the last
// event id it saw, on any instance.
//
// It owns the Log interface and its two implementations, held to one
// behavioural suite (streamlogtest): Memory (one instance alone) and Redis
// (a cluster; Redis Streams under {ns}:stream:{<task id>}, see redis.go).
//
// It must not know HTTP, SSE or the async queue: the server writes the
// events, the async side feeds the log and says who may read it.
package streamlog
