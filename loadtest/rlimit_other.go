//go:build !unix

package main

import "github.com/switchyard-dev/switchyard/loadtest/internal/config"

// raiseFileLimit: only Unix has RLIMIT_NOFILE.
func raiseFileLimit(config.Config) error { return nil }
