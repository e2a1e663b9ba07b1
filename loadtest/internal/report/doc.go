// Package report is what an invocation of the load test found, and its
// verdict: the figures of each run, computed from the ledger's records
// and the processes' samples (run.go), each request classified by what
// the fault may do to it (fault.go), the fleet profile's windows
// (fleet.go) and the sweep's rows (sweep.go); the criteria that judge
// them against the bars (criteria.go, sweepcriteria.go); and the report
// as text, JSON and a self-contained HTML page with SVG plots.
//
// It computes from what it is given and writes: it must not start
// processes, open connections or read the clock for a figure (every time
// comes in the records; the host line's /proc/cpuinfo is all it reads of
// the machine), so that a report judged here is judged the same when read
// back from its JSON.
package report
