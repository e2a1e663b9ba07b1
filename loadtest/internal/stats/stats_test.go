package stats

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100..1, unsorted on purpose
	}
	for _, tc := range []struct {
		name string
		vals []float64
		p    float64
		want float64
	}{
		{"one value", []float64{7}, 99, 7},
		{"p50 of 1..100", hundred, 50, 50},
		{"p95 of 1..100", hundred, 95, 95},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 is the max", hundred, 100, 100},
		{"tiny p is the min", hundred, 0.001, 1},
		{"nearest rank rounds up", []float64{1, 2, 3, 4}, 50, 2},
		{"p99 of 4 values is the max", []float64{4, 1, 3, 2}, 99, 4},
	} {
		if got := Percentile(tc.vals, tc.p); got != tc.want {
			t.Errorf("%s: Percentile(p%g) = %g, want %g", tc.name, tc.p, got, tc.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile of nothing should be NaN")
	}
	if hundred[0] != 100 {
		t.Error("Percentile sorted its input in place")
	}
}

func TestSummarise(t *testing.T) {
	d := Summarise([]float64{3, 1, 2, 10})
	want := Dist{N: 4, Min: 1, Mean: 4, P50: 2, P90: 10, P95: 10, P99: 10, Max: 10}
	if d != want {
		t.Errorf("Summarise = %+v, want %+v", d, want)
	}
	if (Summarise(nil) != Dist{}) {
		t.Error("Summarise of nothing should be the zero Dist (JSON has no NaN)")
	}
}

func TestTrend(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals []float64
		want float64
		ok   bool
	}{
		{"flat", []float64{100, 100, 100, 100, 100}, 0, true},
		{"10% over the run", []float64{100, 102, 104, 106, 108, 110, 110, 110, 110, 110}, (110.0 / 101) - 1, true},
		{"one warm-up step does not dominate", []float64{50, 100, 100, 100, 100, 100, 100, 100, 100, 100}, (100.0 / 75) - 1, true},
		{"shrinking", []float64{100, 100, 90, 90, 90}, -0.1, true},
		{"too few", []float64{1}, 0, false},
	} {
		got, ok := Trend(tc.vals)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: Trend = %g, %v; want %g, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestHistogramCountsEveryValue(t *testing.T) {
	vals := []float64{-5, 0, 0.5, 1, 9.99, 10, 50}
	b := Histogram(vals, 0, 10, 10)
	if len(b) != 10 {
		t.Fatalf("%d buckets, want 10", len(b))
	}
	total := 0
	for _, k := range b {
		total += k.Count
	}
	if total != len(vals) {
		t.Errorf("buckets hold %d values, want %d (out-of-range values go to the end buckets)", total, len(vals))
	}
	if b[0].Count != 3 || b[1].Count != 1 || b[9].Count != 3 {
		t.Errorf("bucket counts %v", b)
	}
}
