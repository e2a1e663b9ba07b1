package streamlog_test

import (
	"testing"

	"github.com/switchyard-dev/switchyard/streamlog"
	"github.com/switchyard-dev/switchyard/streamlog/streamlogtest"
)

func TestMemory(t *testing.T) {
	streamlogtest.Run(t, func(t *testing.T, cfg streamlog.Config) streamlog.Log {
		m := streamlog.NewMemory(cfg)
		run(t, m)
		return m
	}, false)
}
