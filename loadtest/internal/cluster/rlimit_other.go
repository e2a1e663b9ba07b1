//go:build !unix

package cluster

import "github.com/switchyard-dev/switchyard/loadtest/internal/config"

// RaiseFileLimit: only Unix has RLIMIT_NOFILE.
func RaiseFileLimit(config.Config) error { return nil }
