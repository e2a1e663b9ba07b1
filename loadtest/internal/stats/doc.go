// Package stats summarises measurements: nearest-rank percentiles, a
// distribution's summary (Dist), a series' trend and histograms, in the
// units the report uses (milliseconds, rounded to microseconds).
//
// It owns arithmetic only: it must not know what a request, a run or an
// instance is, so that every other package of the load test may use it.
package stats
