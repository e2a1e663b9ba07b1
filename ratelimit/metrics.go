package ratelimit

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts the middleware's decisions. A nil *Metrics counts nothing.
type Metrics struct {
	decisions *prometheus.CounterVec
}

// Decision results, the "result" label of switchyard_ratelimit_decisions_total.
const (
	resultAllowed = "allowed"
	resultLimited = "limited"
	resultError   = "error" // the limiter failed and the request was let through
)

// NewMetrics creates the counters and registers them with reg (nil: not
// registered). Registering twice with one registry shares the counters, so
// every middleware may be given its own NewMetrics(reg).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard",
		Subsystem: "ratelimit",
		Name:      "decisions_total",
		Help:      "Rate limit decisions by rule and result (allowed, limited, or error: the limiter failed and the request was allowed).",
	}, []string{"rule", "result"})
	if reg != nil {
		if err := reg.Register(decisions); err != nil {
			are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
			if !ok {
				panic(err)
			}
			decisions = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return &Metrics{decisions: decisions}
}

// ruleCounters are one rule's counters, resolved once so that a request
// does no label lookup. The zero value counts nothing.
type ruleCounters struct {
	allowed, limited, errored prometheus.Counter
}

func (m *Metrics) forRule(rule string) ruleCounters {
	if m == nil {
		return ruleCounters{}
	}
	return ruleCounters{
		allowed: m.decisions.WithLabelValues(rule, resultAllowed),
		limited: m.decisions.WithLabelValues(rule, resultLimited),
		errored: m.decisions.WithLabelValues(rule, resultError),
	}
}

func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}
