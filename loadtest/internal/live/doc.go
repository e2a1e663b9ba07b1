// Package live is what the load's generators need while the load runs:
// a progress line a second, rewritten in place on a terminal and one a
// line elsewhere (Printer), and a wait until a due time that ends with
// the run (SleepUntil).
//
// It must not compute figures or judge them: what a line says is its
// caller's.
package live
