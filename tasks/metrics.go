package tasks

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/bus"
)

// Metrics are the task counters an operator graphs. One set per instance.
type Metrics struct {
	outcomes   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	overhead   prometheus.Histogram
	refusals   *prometheus.CounterVec
	dropped    *prometheus.CounterVec
	cancels    *prometheus.CounterVec
	holdEnds   *prometheus.CounterVec
	hops       *prometheus.CounterVec
	ownerDied  prometheus.Counter
	outDropped *prometheus.CounterVec
	affinity   *prometheus.CounterVec
	// usageClamped counts the nodes' usage reports cut down to what they
	// handled (usage.go).
	usageClamped *prometheus.CounterVec
	// retries counts the attempts run again on another node (retry.go).
	retries *prometheus.CounterVec
	resumed prometheus.Counter
	hedges  *prometheus.CounterVec

	// The children every request touches, looked up once (record): a
	// WithLabelValues hashes its labels and takes the vector's lock on
	// each call.
	completed             prometheus.Counter
	plainTime, streamTime prometheus.Observer
	// hopsByKind holds hops' child of each envelope kind once one was
	// published (a kind never sent shows no series).
	hopsByKind [256]atomic.Pointer[prometheus.Counter]
}

// hop counts an envelope of kind published to another instance.
func (m *Metrics) hop(kind bus.Kind) {
	if c := m.hopsByKind[kind].Load(); c != nil {
		(*c).Inc()
		return
	}
	c := m.hops.WithLabelValues(kind.String())
	m.hopsByKind[kind].Store(&c)
	c.Inc()
}

// NewMetrics creates the task metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "total",
			Help: "Tasks finished on this (requesting) instance, by outcome: completed, failed, or the error code.",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "duration_seconds",
			Help:    "Time from request to outcome, by mode (plain or stream).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 600},
		}, []string{"mode"}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "overhead_seconds",
			Help:    "Coordinator overhead of completed plain tasks: duration minus the node's reported processing time.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, 1},
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "refusals_total",
			Help: "Assigns this owner refused (and the requester retried elsewhere), by reason.",
		}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "dropped_events_total",
			Help: "Chunks and results dropped because they did not come from the assigned connection, or came for an unknown or finished task.",
		}, []string{"kind"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "cancels_total",
			Help: "Tasks cancelled on their nodes, by reason: task_cancel sent to a node that declared it; to any other, nothing sent and its slot held until it answers.",
		}, []string{"reason"}),
		holdEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "cancel_holds_ended_total",
			Help: "Slots held for cancelled tasks on nodes that do not take task_cancel, freed by how: answered (the answer was discarded), expired (the task's timeout passed first) or disconnected.",
		}, []string{"how"}),
		hops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "cross_instance_envelopes_total",
			Help: "Envelopes this instance published to another instance, by kind.",
		}, []string{"kind"}),
		ownerDied: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "owner_died_total",
			Help: "Tasks failed because the instance holding their node stopped answering.",
		}),
		affinity: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "affinity_total",
			Help: "Requests of a session (X-Session-Id) by where they went: hit (the node that served the session last), miss (another: that one was busy or gone), new (the session's first), error (the affinity store did not answer in time).",
		}, []string{"result"}),
		outDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "outbound_dropped_total",
			Help: "Replies the bus handler queued for publishing that were lost, by reason: queue_full or publish_failed.",
		}, []string{"reason"}),
		usageClamped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "usage_clamped_total",
			Help: "Usage reports of nodes connected here that claimed more tokens than they handled and were cut down, by kind (prompt, completion) and bound: bytes (what the node was sent, or returned) or max_tokens (the request's).",
		}, []string{"kind", "bound"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "retries_total",
			Help: "Attempts that failed for their node's sake and were run again on another node, by reason: node_disconnected (its socket closed or its heartbeat lapsed), instance_gone (the instance holding it died) or node_unavailable (it answered status \"unavailable\").",
		}, []string{"reason"}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "tasks", Name: "resumed_total",
			Help: "Streams that had delivered text when their node failed and were continued on a node that declared resume (counted in retries_total too).",
		}),
	}
	m.hedges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "hedges_total",
		Help: "Plain tasks of a hedged type (--hedge), by how they went: not_needed (answered, or failed, within the delay), no_node (no free second node), first or second (which copy answered first), failed (neither completed).",
	}, []string{"outcome"})
	m.completed = m.outcomes.WithLabelValues(string(StatusCompleted))
	m.plainTime, m.streamTime = m.latency.WithLabelValues("plain"), m.latency.WithLabelValues("stream")
	if reg != nil {
		reg.MustRegister(m.outcomes, m.latency, m.overhead, m.refusals, m.dropped, m.cancels, m.holdEnds, m.hops, m.ownerDied, m.outDropped, m.affinity, m.usageClamped, m.retries, m.resumed, m.hedges)
	}
	return m
}
