package main

// SweepRow is one step: one mode at one rate, over its counted requests
// (the warm-up's are left out of every figure but WarmupNotOK).
type SweepRow struct {
	Mode     string  `json:"mode"`
	Rate     float64 `json:"rate"`
	Expected int     `json:"expected"` // requests due in the counted window
	Sent     int     `json:"sent"`
	OK       int     `json:"ok"`
	Errors   int     `json:"errors"`   // an explicit answer that is not the echo, or a transport error
	Timeouts int     `json:"timeouts"` // no answer by the task timeout plus the grace period
	// NoOutcome and Doubles check the accounting: both must be 0.
	NoOutcome int            `json:"no_outcome"`
	Doubles   int            `json:"doubles"`
	NonOK     map[string]int `json:"non_ok"` // "503 nodes_busy", "timeout", "transport"… → count
	Late      int            `json:"late"`   // sent more than LateMs after their due time
	MaxLagMs  float64        `json:"max_lag_ms"`
	// Lag is how late every counted request went out, in ms: the
	// generator's (and the machine's) share of the latency.
	Lag Dist `json:"lag_ms"`
	// Latency is from each ok request's due time to its answer, in ms.
	Latency Dist `json:"latency_ms"`
	// P99VsNATS is Latency.P99 over the NATS row's at the same rate; 0
	// when there is none (or for the NATS row itself).
	P99VsNATS   float64 `json:"p99_vs_nats,omitempty"`
	MaxInFlight int     `json:"max_in_flight"` // over the whole step, warm-up included
	ConnsOpened int     `json:"conns_opened"`  // HTTP connections dialled during the step (switchyard modes)
	WarmupNotOK int     `json:"warmup_not_ok"`
}
