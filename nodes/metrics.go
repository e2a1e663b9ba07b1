package nodes

import (
	"cmp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connected  prometheus.Gauge
	registered prometheus.Counter
	rejected   *prometheus.CounterVec
	closes     *prometheus.CounterVec
	sendDrops  prometheus.Counter
	invalid    *prometheus.CounterVec
	stolen     prometheus.Counter

	quarantined    *prometheus.CounterVec
	quarantineEnds *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, ws *Waiters) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "switchyard", Subsystem: "nodes", Name: "connected",
			Help: "Node connections held by this instance.",
		}),
		registered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "nodes", Name: "registrations_total",
			Help: "Node registrations accepted.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "nodes", Name: "handshake_rejections_total",
			Help: "Node handshakes refused, by reason.",
		}, []string{"reason"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "nodes", Name: "closes_total",
			Help: "Registered node connections closed, by WebSocket close code (4000 = replaced).",
		}, []string{"code"}),
		sendDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "nodes", Name: "send_queue_drops_total",
			Help: "Nodes dropped because their send queue was full (a slow node).",
		}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "nodes", Name: "invalid_messages_total",
			Help: "Node messages refused or ignored, by kind.",
		}, []string{"kind"}),
		stolen: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "claims", Name: "stolen_total",
			Help: "Local node sockets closed because a refresh found their claim taken by a newer connection.",
		}),
		quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "nodes", Name: "quarantines_total",
			Help: "Nodes quarantined, by reason: failures (their tasks kept failing) or usage (their usage reports kept claiming far more tokens than they handled), each for at least two accounts.",
		}, []string{"reason"}),
		quarantineEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "nodes", Name: "quarantine_ends_total",
			Help: "Quarantine cool-offs that ended, by outcome: resumed (the node serves again) or overridden (an operator had changed its state, which stands).",
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.registered, m.rejected, m.closes, m.sendDrops, m.invalid, m.stolen,
			m.quarantined, m.quarantineEnds,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "switchyard", Subsystem: "tasks", Name: "waiting_for_slot",
				Help: "Requests on this instance waiting for a free slot (every node of their task type was full).",
			}, func() float64 { return float64(ws.Len()) }))
	}
	return m
}

// maxVersionSeries caps the versions switchyard_nodes_connected_by_version
// reports one by one; the nodes of the rest are counted under "other", so
// nodes that declare many versions cannot grow the series without bound.
const maxVersionSeries = 50

var versionDesc = prometheus.NewDesc("switchyard_nodes_connected_by_version",
	"Node connections held by this instance, by the version the node declared (\"unknown\" when it declared none; \"other\" past the 50 most common).",
	[]string{"version"}, nil)

// versionCollector counts the hub's nodes by version when scraped: nothing
// to keep in step as nodes come and go.
type versionCollector struct{ h *Hub }

func (c versionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- versionDesc }

func (c versionCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{}
	c.h.mu.RLock()
	for _, s := range c.h.sessions {
		counts[cmp.Or(s.Info.Version, "unknown")]++
	}
	c.h.mu.RUnlock()
	other := counts["other"] // a node may call its version that: one series still
	delete(counts, "other")
	type vc struct {
		v string
		n int
	}
	all := make([]vc, 0, len(counts))
	for v, n := range counts {
		all = append(all, vc{v, n})
	}
	slices.SortFunc(all, func(a, b vc) int { return cmp.Or(b.n-a.n, strings.Compare(a.v, b.v)) })
	for i, x := range all {
		if i >= maxVersionSeries {
			other += x.n
			continue
		}
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, float64(x.n), x.v)
	}
	if other > 0 {
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, float64(other), "other")
	}
}
