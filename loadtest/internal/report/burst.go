package report

import (
	"fmt"
	"io"
	"strings"
)

// CritBurstSDK is the burst profile's criterion: every SDK node of the
// burst registered and listed.
const CritBurstSDK = "burst: every SDK node in"

// BurstReport is the burst profile's result: the same burst of nodes at
// one instance, from the Go SDK and from a naive client.
type BurstReport struct {
	Nodes int        `json:"nodes"`
	SDK   BurstPhase `json:"sdk"`
	Naive BurstPhase `json:"naive"`
}

// BurstPhase is one client's burst at a fresh instance. Times are seconds
// from the moment every node was let go.
type BurstPhase struct {
	Client   string `json:"client"` // "sdk" or "naive"
	Instance string `json:"instance"`
	// WindowS is how long the client had (the naive one: --duration; the
	// SDK's: until the last node was listed, or it stalled).
	WindowS float64 `json:"window_s"`
	// Registered is how many nodes got node_registered at least once.
	Registered int `json:"registered"`
	// AllS is when the last of them did (0: not every node did).
	AllS float64 `json:"all_registered_s"`
	// Quantiles are those of each node's first registration.
	Quantiles []Qs `json:"first_registration_s"`
	// Listed is how many the instance listed (GET /api/v1/nodes) at the
	// end; ListedS when it first listed every node (0: it did not).
	Listed  int     `json:"listed"`
	ListedS float64 `json:"listed_s"`
	// Sheds are the registrations the instance turned away with 1013
	// because too many were in progress; Rejections every refusal of a
	// handshake, by reason (switchyard_nodes_handshake_rejections_total).
	Sheds      float64            `json:"sheds"`
	Rejections map[string]float64 `json:"rejections,omitempty"`
	// Attempts and DialErrors are the naive client's connection attempts
	// and those that failed before the WebSocket was up.
	Attempts   int64  `json:"attempts,omitempty"`
	DialErrors int64  `json:"dial_errors,omitempty"`
	Stalled    string `json:"stalled,omitempty"` // why the SDK phase stopped waiting, if it did
}

// Qs is one quantile of the first registrations: Q of the nodes had
// registered S seconds after the burst began.
type Qs struct {
	Q float64 `json:"q"`
	S float64 `json:"s"`
}

// EvaluateBurst judges the burst: every SDK node registered and listed.
// The naive client has no bar: its count is the comparison.
func EvaluateBurst(b *BurstReport) []Criterion {
	c := Criterion{Instances: 1, Name: CritBurstSDK, Bar: fmt.Sprintf("all %d registered and listed", b.Nodes), Status: Pass,
		Figure: fmt.Sprintf("%d registered in %.1f s, %d listed after %.1f s", b.SDK.Registered, b.SDK.AllS, b.SDK.Listed, b.SDK.ListedS)}
	if b.SDK.Registered < b.Nodes || b.SDK.Listed < b.Nodes {
		c.Status = Fail
		c.Detail = b.SDK.Stalled
	}
	return []Criterion{c}
}

func (r *Report) writeBurst(w io.Writer) {
	b := r.Burst
	t := newTable("client", "nodes", "window", "registered", "all in", "p50", "p90", "p99", "listed", "sheds (1013)", "attempts")
	for _, p := range []BurstPhase{b.SDK, b.Naive} {
		if p.Client == "" {
			continue
		}
		all, listed, attempts := "—", fmt.Sprintf("%d", p.Listed), "—"
		if p.AllS > 0 {
			all = fmt.Sprintf("%.1f s", p.AllS)
		}
		if p.ListedS > 0 {
			listed += fmt.Sprintf(" (%.1f s)", p.ListedS)
		}
		if p.Attempts > 0 {
			attempts = fmt.Sprintf("%d", p.Attempts)
		}
		q := map[float64]string{}
		for _, x := range p.Quantiles {
			q[x.Q] = fmt.Sprintf("%.1f s", x.S)
		}
		t.row(p.Client, fmt.Sprint(b.Nodes), fmt.Sprintf("%.1f s", p.WindowS), fmt.Sprint(p.Registered), all,
			orDash(q[0.5]), orDash(q[0.9]), orDash(q[0.99]), listed, fmt.Sprintf("%.0f", p.Sheds), attempts)
	}
	t.write(w)
	for _, p := range []BurstPhase{b.SDK, b.Naive} {
		if len(p.Rejections) > 0 {
			fmt.Fprintf(w, "%s: handshakes refused by reason: %s\n", p.Client, strings.Join(counterParts(p.Rejections), ", "))
		}
		if p.DialErrors > 0 {
			fmt.Fprintf(w, "%s: %d connection attempts failed before the WebSocket was up\n", p.Client, p.DialErrors)
		}
		if p.Stalled != "" {
			fmt.Fprintf(w, "%s: %s\n", p.Client, p.Stalled)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
