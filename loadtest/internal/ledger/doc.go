// Package ledger holds every request of one run, as the load test saw it
// from both ends: the client's outcome, and what the simulated node that
// ran it reported. It is the one place outcomes are written, so that
// "exactly one outcome per request" is checked (Accounting), not assumed.
//
// It records; it does not send, judge or print: it must not import the
// SDK, the cluster or the report, so that the generator, the simulated
// nodes and the report can all use it.
package ledger
