// Package fleet is the load test's simulated nodes, every one an SDK node
// agent with a socket of its own: a run's nodes (Nodes), whose handlers
// sleep or stream (sdk/handlers.Sleep) and tell the ledger which request
// they run on which instance, connected at a paced rate and moved to the
// survivors when their instance is lost; the fleet profile's idle nodes
// past what one process may hold, in helper processes of this binary
// (helper.go, `loadtest fleet-helper`); and the sweep's echo workers
// (echo.go, sdk/handlers.Echo).
//
// It connects nodes and reports what they ran; it must not send requests
// or judge outcomes (the generator and the report do), and it speaks to
// an instance only as a node does, through the sdk.
package fleet
