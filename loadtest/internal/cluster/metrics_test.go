package cluster

import (
	"strings"
	"testing"
)

func TestParseCounters(t *testing.T) {
	text := `# HELP switchyard_tasks_refusals_total Assigns refused.
# TYPE switchyard_tasks_refusals_total counter
switchyard_tasks_refusals_total{reason="no_free_slot"} 7
switchyard_tasks_refusals_total{reason="draining"} 0
switchyard_bus_publish_no_receiver_total 447
switchyard_tasks_duration_seconds_bucket{le="0.1"} 12
go_goroutines 55
`
	got := parseCounters(strings.NewReader(text))
	want := map[string]float64{`tasks_refusals_total{reason="no_free_slot"}`: 7, "bus_publish_no_receiver_total": 447}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %g, want %g", k, got[k], v)
		}
	}
}
