package async

import "github.com/prometheus/client_golang/prometheus"

// metrics are what an operator graphs of the async queue, per instance.
type metrics struct {
	reg       prometheus.Registerer
	submitted prometheus.Counter
	claimed   prometheus.Counter
	fenced    prometheus.Counter
	refused   prometheus.Counter
	purged    prometheus.Counter
	released  *prometheus.CounterVec
	ended     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "switchyard", "async"
	m := &metrics{
		reg: reg,
		submitted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "submitted_total",
			Help: "Async tasks queued through this instance."}),
		claimed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "claimed_total",
			Help: "Async tasks this instance claimed for its nodes (a retry is claimed again)."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fenced_total",
			Help: "Ends of async tasks dropped because the lease had moved on (another instance owns the task)."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "refused_total",
			Help: "Async tasks this instance claimed and failed without running: their key had reached a token or budget limit (Deps.Admission)."}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "purged_total",
			Help: "Expired async tasks deleted by this instance."}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "released_total",
			Help: "Async tasks of lost or lapsed leases that this instance's release ended, by outcome (failed: instance_lost; cancelled)."}, []string{"outcome"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ended_total",
			Help: "Async tasks this instance ended, by final status."}, []string{"status"}),
	}
	if reg != nil {
		reg.MustRegister(m.submitted, m.claimed, m.fenced, m.refused, m.purged, m.released, m.ended)
	}
	return m
}

// gauges registers the gauges of tasks running here and of waiters.
func (m *metrics) gauges(running, waiters func() float64) {
	if m.reg != nil {
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "async", Name: "running",
				Help: "Async tasks running on this instance's nodes (claimed here)."}, running),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "switchyard", Subsystem: "async", Name: "waiters",
				Help: "GET /api/v1/tasks/{id}?wait requests waiting here for their task's end."}, waiters))
	}
}
