package bus_test

import (
	"context"
	"errors"
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
		bustest.Start(t, m)
		return m, func(*testing.T) bus.Bus { return m }
	})
}

var _ bus.Control = (*bus.MemoryControl)(nil)

func TestMemoryControl(t *testing.T) {
	bustest.RunControl(t, func(t *testing.T) (bus.Control, func(t *testing.T) bus.Control) {
		c := bus.NewMemoryControl()
		t.Cleanup(func() { _ = c.Close() })
		return c, func(*testing.T) bus.Control { return c }
	})
}

// Close ends every Follow with ErrClosed and refuses later broadcasts.
func TestMemoryControlClose(t *testing.T) {
	c := bus.NewMemoryControl()
	subscribed, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- c.Follow(context.Background(), "auth", func([]byte) {}, func() { close(subscribed) })
	}()
	<-subscribed
	_ = c.Close()
	if err := <-done; !errors.Is(err, bus.ErrClosed) {
		t.Fatalf("Follow after Close returned %v, want ErrClosed", err)
	}
	if _, err := c.Broadcast(context.Background(), "auth", nil); !errors.Is(err, bus.ErrClosed) {
		t.Fatalf("Broadcast after Close returned %v, want ErrClosed", err)
	}
}
