package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// StepRedis is what the Redis servers were asked over a step's counted
// window (INFO commandstats at its start and end, every server summed),
// per ok request: in the cross mode, the bus's publishes among them.
type StepRedis struct {
	// Commands is every command per ok request but INFO (the load test's
	// own reads).
	Commands float64 `json:"commands_per_request"`
	// Publishes is PUBLISH and SPUBLISH per ok request.
	Publishes float64 `json:"publishes_per_request"`
	// ByCommand is each command's calls per ok request, INFO left out.
	ByCommand map[string]float64 `json:"by_command"`
}

// NewStepRedis computes a step's figures from two reads of the commands'
// calls (cluster.RedisCommandCalls) and its ok requests; a command whose
// count went down (a server restarted) is left out. nil when ok is 0.
func NewStepRedis(before, after map[string]int64, ok int) *StepRedis {
	if ok <= 0 {
		return nil
	}
	r := &StepRedis{ByCommand: map[string]float64{}}
	for name, end := range after {
		d := end - before[name]
		if name == "info" || d <= 0 {
			continue
		}
		per := float64(d) / float64(ok)
		r.ByCommand[name] = stats.Round3(per)
		r.Commands += per
		if name == "publish" || name == "spublish" {
			r.Publishes += per
		}
	}
	r.Commands, r.Publishes = stats.Round3(r.Commands), stats.Round3(r.Publishes)
	return r
}

// summary is one line of the figures: the totals, then the commands most
// called (at most top of them).
func (r *StepRedis) summary(top int) string {
	names := make([]string, 0, len(r.ByCommand))
	for n := range r.ByCommand {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(r.ByCommand[b], r.ByCommand[a]), cmp.Compare(a, b))
	})
	var parts []string
	for i, n := range names {
		if i == top {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", n, r.ByCommand[n]))
	}
	s := fmt.Sprintf("%.2f commands, %.2f publishes", r.Commands, r.Publishes)
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}
