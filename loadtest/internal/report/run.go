package report

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// Phases are the run's milestones, in seconds since its start.
type Phases struct {
	RampStart   float64 `json:"ramp_start"`
	SteadyStart float64 `json:"steady_start"`
	SteadyEnd   float64 `json:"steady_end"`
	End         float64 `json:"end"` // every request has its outcome
}

// Event is something that happened during a run, for the timeline.
type Event struct {
	T    float64 `json:"t"` // seconds since the run's start
	What string  `json:"what"`
}

// RunReport is one configuration (a number of instances).
type RunReport struct {
	Instances int                 `json:"instances"`
	Members   []*cluster.Instance `json:"members"`
	Rate      float64             `json:"rate"`
	Phases    Phases              `json:"phases"`
	Fault     FaultReport         `json:"fault"`
	Events    []Event             `json:"events"`

	Accounting ledger.Accounting `json:"accounting"`
	Errors     map[string]int    `json:"errors"`  // "<status> <code>" → count, every non-ok outcome
	Classes    map[string]int    `json:"classes"` // fault class → count

	// Plain requests of the steady phase that succeeded, outside the
	// fault's window: the hop comparison's population.
	Latency  stats.Dist `json:"latency_ms"`
	Overhead stats.Dist `json:"overhead_ms"`
	// The same including the fault window.
	OverheadAll stats.Dist `json:"overhead_all_ms"`
	// Within this run: requests whose node was on the instance they were
	// sent to (local) or on another (cross).
	OverheadLocal stats.Dist `json:"overhead_local_ms"`
	OverheadCross stats.Dist `json:"overhead_cross_ms"`
	Streams       stats.Dist `json:"stream_latency_ms"`
	Ramp          stats.Dist `json:"ramp_latency_ms"`
	SentRate      float64    `json:"steady_sent_per_s"`
	MaxLagMs      float64    `json:"max_send_lag_ms"`
	// FaultToError is, for every victim task (and in-transit one that
	// failed), the time from the signal to its outcome.
	FaultToError stats.Dist `json:"fault_to_error_ms"`

	// Fleet is the fleet profile's idle and loaded windows; nil otherwise.
	Fleet *FleetReport `json:"fleet,omitempty"`

	// Counters are each instance's switchyard counters at the end of the
	// run (refusals, dropped answers, dead owners…), by instance name.
	Counters map[string]map[string]float64 `json:"switchyard_counters,omitempty"`

	Resources []Resources      `json:"resources,omitempty"`
	LoadGen   []cluster.Sample `json:"loadgen,omitempty"` // the load test's own process
	Records   []*ledger.Record `json:"requests"`
}

// Resources is one instance's CPU and memory over the run.
type Resources struct {
	Instance int              `json:"instance"`
	Name     string           `json:"name"`
	Samples  []cluster.Sample `json:"samples"`
	// Over the steady phase (until the kill, for a killed instance).
	CPUMean   float64 `json:"cpu_mean"`
	CPUMax    float64 `json:"cpu_max"`
	CPUScaled float64 `json:"cpu_at_100rps"` // CPUMean × 100 / rate
	RSSStart  int64   `json:"rss_start_kib"`
	RSSEnd    int64   `json:"rss_end_kib"`
	// Segments are the stretches of the steady phase without a topology
	// change (before the fault, and from Settle after it); growth is the
	// mean RSS of a segment's last fifth against its first fifth.
	Segments  []MemSegment `json:"segments"`
	MemGrowth float64      `json:"mem_growth"` // the largest segment growth
	MemJudged bool         `json:"mem_judged"` // some segment was long enough
}

// MemSegment is one stretch judged for memory growth.
type MemSegment struct {
	FromS   float64 `json:"from_s"`
	ToS     float64 `json:"to_s"`
	Samples int     `json:"samples"`
	Growth  float64 `json:"growth"`
	Judged  bool    `json:"judged"` // long enough (Config.MemMinStretch) with enough samples
}

// minMemSamples is the fewest 1-second samples a segment needs, whatever
// its length, for its memory growth to mean anything.
const minMemSamples = 5

// BuildRun computes the figures of one run from its records and samples.
func BuildRun(cfg config.Config, insts []*cluster.Instance, recs []*ledger.Record, doubles []string, fault FaultReport,
	phases Phases, events []Event, samples [][]cluster.Sample, self []cluster.Sample, maxLag time.Duration) *RunReport {
	rr := &RunReport{Instances: len(insts), Members: insts, Rate: cfg.Rate, Phases: phases, Fault: fault,
		Events: events, Errors: map[string]int{}, Classes: map[string]int{}, Records: recs, LoadGen: self,
		MaxLagMs: stats.Round3(stats.Ms(maxLag))}
	Classify(recs, fault)
	rr.Accounting = ledger.Account(recs, doubles)
	wFrom, wTo, hasWindow := faultWindow(fault, stats.Ms(cfg.Settle))

	var lat, over, overAll, local, cross, streams, ramp, toErr []float64
	steadySent := 0
	for _, r := range recs {
		rr.Classes[r.Class]++
		if r.Outcome != ledger.OutcomeOK {
			rr.Errors[errorKey(r)]++
		}
		if (r.Class == ClassVictimTask || r.Class == ClassInTransit) && r.Outcome != ledger.OutcomeOK {
			toErr = append(toErr, r.DoneMs-fault.AtMs)
		}
		if r.Phase == ledger.PhaseSteady && r.Kind == ledger.KindPlain {
			steadySent++
		}
		if r.Outcome != ledger.OutcomeOK {
			continue
		}
		switch {
		case r.Kind == ledger.KindStream:
			streams = append(streams, r.LatencyMs)
		case r.Phase == ledger.PhaseRamp:
			ramp = append(ramp, r.LatencyMs)
		default:
			overAll = append(overAll, r.OverheadMs)
			if hasWindow && r.SentMs < wTo && r.DoneMs > wFrom {
				continue
			}
			lat = append(lat, r.LatencyMs)
			over = append(over, r.OverheadMs)
			if r.NodeInst >= 0 && r.NodeInst == r.Via {
				local = append(local, r.OverheadMs)
			} else if r.NodeInst >= 0 {
				cross = append(cross, r.OverheadMs)
			}
		}
	}
	rr.Latency, rr.Overhead, rr.OverheadAll = stats.Summarise(lat), stats.Summarise(over), stats.Summarise(overAll)
	rr.OverheadLocal, rr.OverheadCross = stats.Summarise(local), stats.Summarise(cross)
	rr.Streams, rr.Ramp, rr.FaultToError = stats.Summarise(streams), stats.Summarise(ramp), stats.Summarise(toErr)
	if d := phases.SteadyEnd - phases.SteadyStart; d > 0 {
		rr.SentRate = stats.Round3(float64(steadySent) / d)
	}

	for i, in := range insts {
		if i >= len(samples) || len(samples[i]) == 0 {
			continue
		}
		rr.Resources = append(rr.Resources, resourcesOf(cfg, in, samples[i], phases, fault, hasWindow, wFrom/1000, wTo/1000))
	}
	return rr
}

// errorKey names a non-ok outcome: "502 node_disconnected", "transport", "lost".
func errorKey(r *ledger.Record) string {
	switch r.Outcome {
	case ledger.OutcomeError:
		if r.Kind == ledger.KindStream && r.Status == http.StatusOK {
			return "stream " + r.Code // an error event in a stream that had started
		}
		if r.Status == 0 {
			return r.Code
		}
		return fmt.Sprintf("%d %s", r.Status, r.Code)
	case ledger.OutcomeFailed:
		return "task failed"
	}
	return r.Outcome
}

func resourcesOf(cfg config.Config, in *cluster.Instance, s []cluster.Sample, ph Phases, f FaultReport, hasWindow bool, wFromS, wToS float64) Resources {
	res := Resources{Instance: in.Index, Name: in.Name, Samples: s}
	killed := f.Skipped == "" && f.Kind != config.FaultNone && f.Instance == in.Index
	end := ph.SteadyEnd
	if killed && f.AtMs > 0 {
		end = min(end, f.AtMs/1000)
	}
	var steady []cluster.Sample
	for _, x := range s {
		if x.T >= ph.SteadyStart && x.T <= end {
			steady = append(steady, x)
		}
	}
	if len(steady) == 0 {
		return res
	}
	cpus := make([]float64, len(steady))
	for i, x := range steady {
		cpus[i] = x.CPU
	}
	res.CPUMean = stats.Round3(stats.Mean(cpus))
	res.CPUMax = stats.Round3(slices.Max(cpus))
	res.CPUScaled = stats.Round3(res.CPUMean * 100 / cfg.Rate)
	res.RSSStart, res.RSSEnd = steady[0].RSSKiB, steady[len(steady)-1].RSSKiB

	type span struct{ from, to float64 }
	spans := []span{{ph.SteadyStart, end}}
	if hasWindow {
		spans = []span{{ph.SteadyStart, min(wFromS, end)}}
		if !killed {
			spans = append(spans, span{wToS, ph.SteadyEnd})
		}
	}
	for _, sp := range spans {
		if sp.to <= sp.from {
			continue
		}
		var rss []float64
		for _, x := range steady {
			if x.T >= sp.from && x.T <= sp.to {
				rss = append(rss, float64(x.RSSKiB))
			}
		}
		seg := MemSegment{FromS: stats.Round3(sp.from), ToS: stats.Round3(sp.to), Samples: len(rss)}
		long := sp.to-sp.from >= cfg.MemMinStretch.Seconds()
		g, ok := stats.Trend(rss)
		if ok {
			seg.Growth = math.Round(g*1e4) / 1e4
		}
		if ok && long && len(rss) >= minMemSamples {
			seg.Judged = true
			if !res.MemJudged || seg.Growth > res.MemGrowth {
				res.MemGrowth = seg.Growth
			}
			res.MemJudged = true
		}
		res.Segments = append(res.Segments, seg)
	}
	return res
}
