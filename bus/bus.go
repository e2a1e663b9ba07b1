package bus

import (
	"context"
	"errors"
)

// Handler receives the envelopes addressed to one instance. It is called
// from the bus's receive loop and must not block: hand slow work off.
type Handler func(*Envelope)

// Bus moves envelopes between instances. Memory (one process) and Redis
// (a cluster) implement it, and one behavioural suite (bustest) runs
// against both.
//
// A bus is built whole and starts nothing; Run runs it. Subscribe,
// Publish and Receivers may be called before Run (an instance confirms its
// subscription before it runs anything), but what a bus does on goroutines
// of its own waits for Run: on Redis, delivery to a subscription's handler
// and the publishes that must queue (see Redis).
type Bus interface {
	// Subscribe delivers every envelope addressed to instance id to h. It
	// returns once the subscription is confirmed, so an instance never
	// announces itself before it can hear replies.
	Subscribe(ctx context.Context, id string, h Handler) (Subscription, error)

	// Publish sends e to instance to and returns how many subscribers
	// received it. Zero means nobody is listening there: the instance is
	// gone, and the caller acts on that at once (invariants 4 and 5).
	Publish(ctx context.Context, to string, e *Envelope) (int, error)

	// Receivers reports how many subscribers each instance has right now
	// (PUBSUB NUMSUB on Redis). Instances with none may be absent.
	Receivers(ctx context.Context, ids []string) (map[string]int, error)

	// Run runs the bus until ctx ends. Then it closes it: every
	// subscription stops delivering, and Subscribe and Publish fail with
	// ErrClosed. It returns nil once everything the bus started has
	// stopped. Run once.
	Run(ctx context.Context) error
}

// Subscription is one instance's live subscription.
type Subscription interface {
	// Close stops delivery; after it returns the handler is not called again.
	Close() error
}

// ErrClosed is returned by a Bus that has been closed (its Run ended).
var ErrClosed = errors.New("bus: closed")

// DefaultNamespace prefixes every Redis key and channel when a config leaves
// its Namespace empty. It is the one place the default is written: bus is
// the lowest package, so every other one (nodes, server, cmd) can use it.
const DefaultNamespace = "sy"
