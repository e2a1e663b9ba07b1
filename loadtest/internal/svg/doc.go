// Package svg draws the HTML report's plots as hand-written SVG: line
// charts with markers, and histograms. The report is one self-contained
// file that opens offline, with no script and nothing fetched.
//
// It draws what it is given: it must not know what a run, a request or an
// instance is.
package svg
