// Package config is one invocation of the load test: the Config every
// other package reads, the named profiles (seed, smoke, fleet, sweep) it
// starts from, the defaults that fill its zero fields (defaults.go, the
// one place they are filled) and Validate, which refuses an unusable
// configuration with every problem at once, each in a sentence that says
// which flag to change.
//
// It owns the load's shape and the bars it is judged by, nothing that
// runs: it must not start processes, open connections or read files, and
// it imports no other package of the load test, so that all of them can
// import it.
package config
