// Package bus carries envelopes between switchyard instances.
//
// It owns:
//   - the envelope kinds and their msgpack codec (envelope.go), whose kind
//     numbers are on the wire;
//   - the Bus interface with two implementations, Memory (one process) and
//     Redis (a cluster; classic or, with RedisConfig.Sharded, sharded pub/sub),
//     and the one behavioural suite both pass (bustest);
//   - the control channel (Control, control.go): announcements every
//     instance must hear, by topic, with MemoryControl and RedisControl
//     under one suite (bustest.RunControl);
//   - the instance registry (Registry: alive keys, the index, the sweep),
//     the single-instance lock of --multi-instance=false (Lock), and the
//     figures each instance publishes for the others (Figures);
//   - the connection to Redis (DialRedis: a client tuned to fail fast, and
//     on a Redis Cluster to re-read the slot map when a master is lost);
//   - the Redis names of those: {ns}:inst:{iid} (an instance's channel),
//     {ns}:{topic}:events (a control topic's channel),
//     {ns}:inst:alive:{iid}, {ns}:inst:index, {ns}:lock and
//     {ns}:{kind}:{iid} (figures), and DefaultNamespace, the one place the
//     default {ns} is written.
//
// A Bus moves an envelope to the instance it is addressed to and reports how
// many subscribers received it; what an envelope means is the business of
// tasks. It must not know tasks, nodes, sockets or HTTP, must not import
// echo, pgx or any other switchyard package (it is the bottom of the
// dependency order), and a Handler it calls must not block its receive loop.
package bus
