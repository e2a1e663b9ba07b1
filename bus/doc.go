// Package bus carries envelopes between switchyard instances (DESIGN §1, §4).
//
// It owns:
//   - the envelope kinds and their msgpack codec (envelope.go), whose kind
//     numbers are on the wire;
//   - the Bus interface with two implementations, Memory (one process) and
//     Redis (a cluster; classic or, with RedisConfig.Sharded, sharded pub/sub),
//     and the one behavioural suite both pass (bustest);
//   - the instance registry (Registry: alive keys, the index, the sweep) and
//     the single-instance lock of --multi-instance=false (Lock);
//   - the Redis names of those: {ns}:inst:{iid} (an instance's channel),
//     {ns}:inst:alive:{iid}, {ns}:inst:index and {ns}:lock, and
//     DefaultNamespace, the one place the default {ns} is written.
//
// A Bus moves an envelope to the instance it is addressed to and reports how
// many subscribers received it; what an envelope means is the business of
// tasks. It must not know tasks, nodes, sockets or HTTP, must not import
// echo, pgx or any other switchyard package (it is the bottom of the
// dependency order), and a Handler it calls must not block its receive loop.
package bus
