package report

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"slices"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
	"github.com/switchyard-dev/switchyard/loadtest/internal/svg"
)

// WriteHTML writes the report as one self-contained page: the summary,
// the criteria and, per run, latency over time (with the fault marked), a
// latency histogram, and each instance's CPU and RSS over time.
func (r *Report) WriteHTML(w io.Writer) error {
	var b bytes.Buffer
	verdictText := "PASS"
	if !r.Pass {
		verdictText = "FAIL"
	}
	fmt.Fprintf(&b, `<!doctype html><html><head><meta charset="utf-8"><title>switchyard load test — %s</title>
<style>body{font-family:sans-serif;margin:24px;max-width:1100px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}th{background:#f3f3f3}
td.l{text-align:left}.PASS{color:#1a7f37;font-weight:bold}.FAIL{color:#cf222e;font-weight:bold}.SKIP{color:#9a6700}
pre{background:#f6f8fa;padding:8px;font-size:12px;overflow-x:auto}</style></head><body>
`, verdictText)
	fmt.Fprintf(&b, "<h1>switchyard load test: <span class=%q>%s</span></h1>\n", verdictText, verdictText)
	fmt.Fprintf(&b, "<p>Profile <b>%s</b>, %s mode. %s.</p>\n", html.EscapeString(r.Profile), html.EscapeString(r.Mode), html.EscapeString(r.Shape))
	fmt.Fprintf(&b, "<p>Host: %d CPUs (%s), %s, %s. %s → %s.</p>\n", r.Host.CPUs, html.EscapeString(r.Host.CPUModel),
		r.Host.OS, r.Host.GoVersion, r.Started.Format("2006-01-02 15:04:05"), r.Finished.Format("15:04:05"))

	var text bytes.Buffer
	r.WriteText(&text)
	b.WriteString("<h2>Criteria</h2>\n<table><tr><th>status</th><th>run</th><th>criterion</th><th>figure</th><th>bar</th></tr>\n")
	for _, c := range r.Criteria {
		fig := html.EscapeString(c.Figure)
		if c.Detail != "" {
			fig += "<br><small>" + html.EscapeString(c.Detail) + "</small>"
		}
		fmt.Fprintf(&b, "<tr><td class=%q>%s</td><td>%s</td><td class=l>%s</td><td class=l>%s</td><td class=l>%s</td></tr>\n",
			c.Status, c.Status, html.EscapeString(c.scope()), html.EscapeString(c.Name), fig, html.EscapeString(c.Bar))
	}
	b.WriteString("</table>\n")
	if r.Sweep != nil {
		b.WriteString(r.Sweep.sweepCPUHTML())
	}
	b.WriteString("<h2>Summary</h2>\n<pre>")
	b.WriteString(html.EscapeString(text.String()))
	b.WriteString("</pre>\n")

	for _, run := range r.Runs {
		fmt.Fprintf(&b, "<h2>%d instance%s</h2>\n", run.Instances, Plural(run.Instances))
		marks := runMarkers(run)
		b.WriteString(latencyOverTime(run, marks))
		b.WriteString(latencyHistogram(run))
		if run.Fleet != nil && len(run.Fleet.RedisSeries) > 0 {
			rs := svg.Series{Name: "commands/s", Color: svg.Palette[0]}
			for _, x := range run.Fleet.RedisSeries {
				rs.Pts = append(rs.Pts, [2]float64{x.T, x.PerSec})
			}
			b.WriteString(`<div class="chart" data-plot="redis">` + svg.LineChart("Redis commands/s, every server together", "seconds", "commands/s", []svg.Series{rs}, marks) + "</div>\n")
		}
		if len(run.Resources) > 0 {
			b.WriteString(resourceChart(run, marks, "CPU", "% of one core", func(s cluster.Sample) float64 { return s.CPU }))
			b.WriteString(resourceChart(run, marks, "RSS", "MiB", func(s cluster.Sample) float64 { return float64(s.RSSKiB) / 1024 }))
		} else {
			b.WriteString("<p>CPU and RSS: not measured (the instances were not started by this program).</p>\n")
		}
	}
	b.WriteString("</body></html>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// runMarkers marks the steady phase and the fault (the fleet profile: its
// idle and loaded windows).
func runMarkers(run *RunReport) []svg.Marker {
	m := []svg.Marker{
		{X: run.Phases.SteadyStart, Label: "steady", Color: "#555"},
		{X: run.Phases.SteadyEnd, Label: "end", Color: "#555"},
	}
	if f := run.Fleet; f != nil {
		m = []svg.Marker{{X: run.Phases.SteadyEnd, Label: "end", Color: "#555"}}
		if f.Idle.Measured {
			m = append(m, svg.Marker{X: f.Idle.FromS, Label: "idle", Color: "#555"})
		}
		if f.Loaded.Measured {
			m = append(m, svg.Marker{X: f.Loaded.FromS, Label: "loaded", Color: "#555"})
		}
	}
	if f := run.Fault; f.Skipped == "" && f.AtMs > 0 {
		label := "kill -9"
		if f.Kind == config.FaultSIGTERM {
			label = "SIGTERM"
		}
		name := fmt.Sprintf("instance %d", f.Instance+1)
		m = append(m, svg.Marker{X: f.AtMs / 1000, Label: label + " " + name, Color: "#cf222e"})
	}
	return m
}

// latencyOverTime plots per-second p50, p99 and max of plain latency by
// the second each request was sent, and every non-ok outcome as a dot at
// the time it arrived.
func latencyOverTime(run *RunReport, marks []svg.Marker) string {
	bySec := map[int][]float64{}
	var errs [][2]float64
	for _, rec := range run.Records {
		if rec.Outcome != ledger.OutcomeOK {
			errs = append(errs, [2]float64{rec.DoneMs / 1000, rec.LatencyMs})
			continue
		}
		if rec.Kind == ledger.KindPlain {
			s := int(rec.SentMs / 1000)
			bySec[s] = append(bySec[s], rec.LatencyMs)
		}
	}
	secs := make([]int, 0, len(bySec))
	for s := range bySec {
		secs = append(secs, s)
	}
	slices.Sort(secs)
	p50 := svg.Series{Name: "p50", Color: svg.Palette[0]}
	p99 := svg.Series{Name: "p99", Color: svg.Palette[1]}
	mx := svg.Series{Name: "max", Color: "#999", Dash: true}
	for _, s := range secs {
		v := bySec[s]
		x := float64(s) + 0.5
		p50.Pts = append(p50.Pts, [2]float64{x, stats.Percentile(v, 50)})
		p99.Pts = append(p99.Pts, [2]float64{x, stats.Percentile(v, 99)})
		mx.Pts = append(mx.Pts, [2]float64{x, slices.Max(v)})
	}
	ss := []svg.Series{p50, p99, mx}
	if len(errs) > 0 {
		name := fmt.Sprintf("not ok (%d)", len(errs))
		ss = append(ss, svg.Series{Name: name, Color: "#cf222e", Dots: true, Pts: thin(errs, maxDots)})
	}
	return `<div class="chart" data-plot="latency">` + svg.LineChart("Plain request latency over time (per second sent)", "seconds", "ms", ss, marks) + "</div>\n"
}

// maxDots bounds the dots of one plot, so that a run with many errors
// still gives a page a browser opens.
const maxDots = 2000

// thin keeps at most n points, evenly spread.
func thin(pts [][2]float64, n int) [][2]float64 {
	if len(pts) <= n {
		return pts
	}
	out := make([][2]float64, 0, n)
	for i := range n {
		out = append(out, pts[i*len(pts)/n])
	}
	return out
}

// latencyHistogram plots the steady phase's plain latency and overhead.
func latencyHistogram(run *RunReport) string {
	var lat, over []float64
	for _, rec := range run.Records {
		if rec.Outcome == ledger.OutcomeOK && rec.Kind == ledger.KindPlain && rec.Phase == ledger.PhaseSteady {
			lat = append(lat, rec.LatencyMs)
			over = append(over, rec.OverheadMs)
		}
	}
	if len(lat) == 0 {
		return "<p>No successful plain requests in the steady phase.</p>\n"
	}
	hiLat := math.Ceil(stats.Percentile(lat, 99.9)/10) * 10
	hiOver := math.Max(1, math.Ceil(stats.Percentile(over, 99.5)))
	return `<div class="chart" data-plot="histogram">` +
		svg.BarChart(fmt.Sprintf("Latency histogram, steady phase (%d requests; the last bar holds the slowest 0.1%%)", len(lat)),
			"latency, ms", "requests", stats.Histogram(lat, 0, hiLat, 60), svg.Palette[0]) +
		svg.BarChart("Overhead histogram (latency − processing_time_ms; the last bar holds the slowest 0.5%)",
			"overhead, ms", "requests", stats.Histogram(over, math.Min(0, math.Floor(slices.Min(over))), hiOver, 60), svg.Palette[2]) +
		"</div>\n"
}

// resourceChart plots one measure of every instance over time, and the
// load test's own process dashed.
func resourceChart(run *RunReport, marks []svg.Marker, what, unit string, f func(cluster.Sample) float64) string {
	var ss []svg.Series
	for i, res := range run.Resources {
		s := svg.Series{Name: res.Name, Color: svg.Palette[i%len(svg.Palette)]}
		for _, x := range res.Samples {
			s.Pts = append(s.Pts, [2]float64{x.T, f(x)})
		}
		ss = append(ss, s)
	}
	if len(run.LoadGen) > 0 {
		s := svg.Series{Name: "load test", Color: "#999", Dash: true}
		for _, x := range run.LoadGen {
			s.Pts = append(s.Pts, [2]float64{x.T, f(x)})
		}
		ss = append(ss, s)
	}
	return `<div class="chart" data-plot="` + what + `">` + svg.LineChart(what+" per instance over time", "seconds", unit, ss, marks) + "</div>\n"
}
