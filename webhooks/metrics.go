package webhooks

import "github.com/prometheus/client_golang/prometheus"

// The outcomes counted by switchyard_webhook_deliveries_total.
const (
	outcomeDelivered = "delivered"
	outcomeRetried   = "retried"
	outcomeGivenUp   = "given_up"
)

type metrics struct {
	outcomes *prometheus.CounterVec
	pending  prometheus.Gauge
	latency  prometheus.Histogram
	polls    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_webhook_deliveries_total",
			Help: "Webhook attempts by outcome: delivered (a 2xx), retried (failed, to be tried again), given_up (failed past the retry window).",
		}, []string{"outcome"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_webhook_pending",
			Help: "Webhook deliveries not yet delivered or given up, cluster-wide (as last counted by this instance).",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_webhook_attempt_seconds",
			Help:    "Time of one webhook attempt, from the dial to the end of the answer (or the failure).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		polls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_webhook_polls_total",
			Help: "Queries of this instance for due webhook deliveries (about one a second while idle).",
		}),
	}
	for _, o := range []string{outcomeDelivered, outcomeRetried, outcomeGivenUp} {
		m.outcomes.WithLabelValues(o) // shown at 0 before the first
	}
	if reg != nil {
		reg.MustRegister(m.outcomes, m.pending, m.latency, m.polls)
	}
	return m
}
