// Package bus carries envelopes between switchyard instances: the envelope
// types and their msgpack codec, the Bus interface with an in-process
// (Memory) and a Redis implementation, and the instance registry.
//
// It owns nothing about tasks or sockets: a Bus moves envelopes to the
// instance they are addressed to and reports how many subscribers received
// them. It must not import echo, pgx or any other switchyard package.
package bus

// DefaultNamespace prefixes every Redis key and channel when a config leaves
// its Namespace empty. It is the one place the default is written: bus is
// the lowest package, so every other one (nodes, server, cmd) can use it.
const DefaultNamespace = "sy"
