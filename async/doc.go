// Package async runs the async tasks of POST /api/v1/tasks:
// tasks that wait durably in the store's queue (store.AsyncQueue) until a
// node is free, and outlive the HTTP request that asked for them.
//
// It owns one component, the Pump (New), one per instance, built whole at
// construction. For the task types this instance's own nodes serve, it
// claims queued tasks when a local node has a free slot and no synchronous
// request waits for one here, and runs each through the task engine
// restricted to local nodes (tasks.Request.LocalOnly), once the Admission
// hook admits it (its key's limits, judged again at the claim): the lease holder and
// the node live and die together, so a killed instance loses both and no
// other instance runs its tasks twice. It renews its leases, ends its tasks
// fenced by the lease's generation, releases the leases of lost instances
// (a task that had not streamed is retried once), purges expired tasks,
// wakes the waiters of ?wait, and hands ended tasks with a webhook_url to
// the Webhooks hook (with the store's outbox as the backstop).
//
// Wake-ups come from outside as Events (events.go): a submit anywhere, an
// end anywhere; the server carries them between instances (a Redis pub/sub
// channel) and hands them to Heard. A freed local slot is Nudge. A
// backstop poll covers what is lost.
//
// It must not know HTTP routes, Redis, or SQL: the queue is the store's,
// the broadcast is the server's, the nodes are behind Local.
package async
