package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p ≤ 100) of vals by the
// nearest-rank method: the smallest value with at least p % of the values
// at or below it. It is always one of the measured values, never an
// interpolation, so a reported p99 is a latency a request really had.
// vals need not be sorted; it is not modified. Empty input gives NaN.
func Percentile(vals []float64, p float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	return percentileSorted(s, p)
}

// percentileSorted is Percentile on an already sorted slice.
func percentileSorted(s []float64, p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// Dist summarises a distribution of milliseconds.
type Dist struct {
	N    int     `json:"n"`
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Summarise computes a Dist; an empty input gives a Dist with N 0 and
// zero figures (JSON has no NaN).
func Summarise(vals []float64) Dist {
	if len(vals) == 0 {
		return Dist{}
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return Dist{
		N:    len(s),
		Min:  Round3(s[0]),
		Mean: Round3(sum / float64(len(s))),
		P50:  Round3(percentileSorted(s, 50)),
		P90:  Round3(percentileSorted(s, 90)),
		P95:  Round3(percentileSorted(s, 95)),
		P99:  Round3(percentileSorted(s, 99)),
		Max:  Round3(s[len(s)-1]),
	}
}

// Mean is the arithmetic mean, NaN for no values.
func Mean(vals []float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, v := range vals {
		sum += v
	}
	return sum / float64(len(vals))
}

// Trend compares the mean of the last fifth of a series with the mean of
// its first fifth (at least one value each) and returns the relative
// growth (0.02 is 2 %). Comparing means of windows rather than the first
// and last sample keeps one warm-up step or one GC from deciding the
// figure. ok is false for fewer than 2 values.
func Trend(vals []float64) (growth float64, ok bool) {
	if len(vals) < 2 {
		return 0, false
	}
	w := max(len(vals)/5, 1)
	first := Mean(vals[:w])
	last := Mean(vals[len(vals)-w:])
	if first <= 0 {
		return 0, false
	}
	return last/first - 1, true
}

// Bucket is one bar of a histogram: values in [Lo, Hi).
type Bucket struct {
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Count int     `json:"count"`
}

// Histogram puts vals into n equal buckets from lo to hi; values outside
// are counted in the first or last bucket, so the counts add up to
// len(vals).
func Histogram(vals []float64, lo, hi float64, n int) []Bucket {
	if n < 1 || !(hi > lo) {
		return nil
	}
	b := make([]Bucket, n)
	w := (hi - lo) / float64(n)
	for i := range b {
		b[i].Lo, b[i].Hi = lo+float64(i)*w, lo+float64(i+1)*w
	}
	for _, v := range vals {
		i := int((v - lo) / w)
		b[min(max(i, 0), n-1)].Count++
	}
	return b
}

// Round3 rounds v to three decimals (microseconds, for a figure in
// milliseconds); NaN and infinities, which JSON cannot carry, become 0.
func Round3(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return math.Round(v*1000) / 1000
}

// Ms is d in milliseconds, the unit of every figure of the report.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
