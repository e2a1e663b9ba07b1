package bus_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ bus.Bus = (*bus.Memory)(nil)

func TestMemory(t *testing.T) {
	bustest.Run(t, func(t *testing.T) (bus.Bus, func(t *testing.T) bus.Bus) {
		m := bus.NewMemory()
		t.Cleanup(func() { _ = m.Close() })
		return m, func(*testing.T) bus.Bus { return m }
	})
}
