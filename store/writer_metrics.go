package store

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// writerMetrics are the Writer's gauges and counters. They exist whether or
// not a registry was given, so the Writer never checks for nil.
type writerMetrics struct {
	pending       prometheus.Gauge
	dropped       *prometheus.CounterVec // kind: task, outcome, usage
	batchLag      prometheus.Histogram
	flushErrors   prometheus.Counter
	flushDuration prometheus.Histogram
	// deadLetters counts records the store refused, set aside; kind as
	// dropped, and suspension.
	deadLetters      *prometheus.CounterVec
	deadLetterErrors prometheus.Counter
}

func newWriterMetrics(reg prometheus.Registerer, log *slog.Logger) writerMetrics {
	const ns, sub = "switchyard", "store"
	m := writerMetrics{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "pending_items",
			Help: "Task records, node outcomes and usage reports buffered for the database, including a batch being written.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "dropped_total",
			Help: "Task records, node outcomes and usage reports (kind task, outcome, usage) dropped because the buffer was full or the writer closed.",
		}, []string{"kind"}),
		batchLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "batch_lag_seconds",
			Help:    "Time from a task record being handed to the writer to its commit (store batch lag).",
			Buckets: []float64{.01, .05, .1, .2, .3, .5, 1, 2, 5, 10, 30, 60, 300},
		}),
		flushErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "flush_errors_total",
			Help: "Batch writes that failed: the batch is kept and retried, or, refused by the store, split to set aside the records it refuses.",
		}),
		flushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "flush_duration_seconds",
			Help:    "Duration of one batch write to the database.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1 ms .. 8 s
		}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "dead_letters_total",
			Help: "Records (kind task, outcome, usage, suspension) the store refused, set aside in the dead_letters table so that the others are written.",
		}, []string{"kind"}),
		deadLetterErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "dead_letter_errors_total",
			Help: "Refused records that could not be kept in the dead_letters table either: dropped, and only logged.",
		}),
	}
	// Every kind starts at zero so that a rate() over them works from boot.
	for _, k := range []string{KindTask, KindOutcome, KindUsage} {
		m.dropped.WithLabelValues(k)
		m.deadLetters.WithLabelValues(k)
	}
	m.deadLetters.WithLabelValues(KindSuspension)
	if reg != nil {
		for _, c := range []prometheus.Collector{m.pending, m.dropped, m.batchLag, m.flushErrors, m.flushDuration,
			m.deadLetters, m.deadLetterErrors} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if errors.As(err, &are) {
					// A second Writer on one registry (tests, or a misuse):
					// its numbers stay unexported rather than crash the boot.
					log.Warn("store writer metrics already registered; this writer's are not exported")
					break
				}
				log.Error("cannot register store writer metrics", "err", err)
				break
			}
		}
	}
	return m
}
