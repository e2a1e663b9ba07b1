package sdk

import (
	"context"
	"time"
)

// SetSleep replaces how n waits between connection attempts (the default
// sleeps on a timer); call it before Run.
func SetSleep(n *Node, f func(ctx context.Context, d time.Duration) bool) { n.sleep = f }
