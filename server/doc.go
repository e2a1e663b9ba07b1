// Package server is the HTTP face of an instance and the owner of every
// component's lifecycle: the App builds the store, bus, limiter, node hub
// and task components from a Config, serves the echo routes (client API,
// node WebSocket, health, metrics), and drains on shutdown.
//
// It holds no task or node logic of its own, and knows no Redis key names:
// those live in tasks, nodes and bus.
package server
