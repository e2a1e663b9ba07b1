//go:build !unix

package main

// raiseFileLimit: only Unix has RLIMIT_NOFILE.
func raiseFileLimit(Config) error { return nil }
