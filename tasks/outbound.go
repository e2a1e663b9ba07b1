package tasks

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchyard-dev/switchyard/bus"
)

// outboundWorkers publish the queue in parallel: the envelopes in it are
// independent (at most one per task attempt), so order does not matter,
// and one slow publish must not hold the others back.
const outboundWorkers = 4

// publishTimeout bounds one publish of a queued envelope (invariant
// 14).
const publishTimeout = 2 * time.Second

// outbound publishes, off the bus's receive loop, the envelopes that loop
// produces (a refused assign's answer): bus.Handler must not block, and a
// publish is a Redis round trip. The queue is bounded (invariant 13); when
// it is full the envelope is dropped and counted, and the requester's
// deadline or watcher answers its task instead. Its entry bound is its
// byte bound: what it carries has no payload (a refusal with its short
// message, a node_gone, a cancel with its reason: under 1 KiB each, so
// under 1 MiB at the default 1,024); results and chunks, which do, are
// published by the node's reader itself (owner.reply).
type outbound struct {
	bus     Bus
	q       chan outMsg
	metrics *Metrics
	log     *slog.Logger
}

type outMsg struct {
	to string
	e  *bus.Envelope
}

func newOutbound(b Bus, size int, m *Metrics, log *slog.Logger) *outbound {
	return &outbound{bus: b, q: make(chan outMsg, size), metrics: m, log: log}
}

// post queues e for instance to and never blocks.
func (o *outbound) post(to string, e *bus.Envelope) {
	select {
	case o.q <- outMsg{to, e}:
	default:
		o.metrics.outDropped.WithLabelValues("queue_full").Inc() // per message: logged at debug only
		o.log.Debug("outbound queue full: dropped a reply; the requester's deadline will answer its task",
			"kind", e.Kind.String(), "task_id", e.TaskID, "to", to, "queue", cap(o.q))
	}
}

// start runs the publishers under g until ctx ends. What is still queued
// then is dropped: the instance is stopping.
func (o *outbound) start(ctx context.Context, g *errgroup.Group) {
	for range outboundWorkers {
		g.Go(func() error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case m := <-o.q:
					o.publish(ctx, m)
				}
			}
		})
	}
}

func (o *outbound) publish(ctx context.Context, m outMsg) {
	o.metrics.hop(m.e.Kind)
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if _, err := o.bus.Publish(pctx, m.to, m.e); err != nil {
		o.metrics.outDropped.WithLabelValues("publish_failed").Inc() // per message: logged at debug only
		o.log.Debug("cannot reach the requester instance", "kind", m.e.Kind.String(), "task_id", m.e.TaskID, "to", m.to, "err", err)
	}
}
