package svg

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// Series is one line (or set of dots) of a chart.
type Series struct {
	Name  string
	Color string
	Pts   [][2]float64 // x, y
	Dash  bool
	Dots  bool // dots instead of a line
}

// Marker is a vertical line at X, such as the moment of a kill.
type Marker struct {
	X     float64
	Label string
	Color string
}

const (
	chartW, chartH                 = 860, 300
	padL, padR, padT, padB float64 = 64, 16, 34, 44
)

// Palette colours instances and series.
var Palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// LineChart draws series over a shared x axis, with markers.
func LineChart(title, xLabel, yLabel string, ss []Series, marks []Marker) string {
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for _, p := range s.Pts {
			xmin, xmax, ymax = min(xmin, p[0]), max(xmax, p[0]), max(ymax, p[1])
		}
	}
	for _, m := range marks {
		xmin, xmax = min(xmin, m.X), max(xmax, m.X)
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 0, 1
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	if ymax <= 0 {
		ymax = 1
	}
	yTicks := niceTicks(0, ymax*1.05, 5)
	ytop := yTicks[len(yTicks)-1]
	xTicks := niceTicks(xmin, xmax, 10)
	px := func(x float64) float64 { return padL + (x-xmin)/(xmax-xmin)*(chartW-padL-padR) }
	py := func(y float64) float64 { return chartH - padB - y/ytop*(chartH-padT-padB) }

	var b strings.Builder
	svgOpen(&b, title)
	axes(&b, xLabel, yLabel)
	for _, t := range yTicks {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, padL, py(t), chartW-padR, py(t))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="11">%s</text>`, padL-4, py(t)+4, tickLabel(t))
	}
	for _, t := range xTicks {
		if t < xmin || t > xmax {
			continue
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11">%s</text>`, px(t), chartH-padB+14, tickLabel(t))
	}
	for _, m := range marks {
		fmt.Fprintf(&b, `<line class="marker" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/>`,
			px(m.X), padT, px(m.X), chartH-padB, m.Color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="%s">%s</text>`, px(m.X)+3, padT+10, m.Color, html.EscapeString(m.Label))
	}
	for _, s := range ss {
		if s.Dots {
			for _, p := range s.Pts {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`, px(p[0]), py(min(p[1], ytop)), s.Color)
			}
			continue
		}
		if len(s.Pts) == 0 {
			continue
		}
		var pts strings.Builder
		for _, p := range s.Pts {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(p[0]), py(p[1]))
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.4"%s points="%s"/>`, s.Color, dash, strings.TrimSpace(pts.String()))
	}
	legend(&b, ss)
	b.WriteString("</svg>\n")
	return b.String()
}

// BarChart draws a histogram.
func BarChart(title, xLabel, yLabel string, buckets []stats.Bucket, color string) string {
	var b strings.Builder
	svgOpen(&b, title)
	axes(&b, xLabel, yLabel)
	if len(buckets) == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	ymax := 1
	for _, k := range buckets {
		ymax = max(ymax, k.Count)
	}
	yTicks := niceTicks(0, float64(ymax)*1.05, 5)
	ytop := yTicks[len(yTicks)-1]
	xmin, xmax := buckets[0].Lo, buckets[len(buckets)-1].Hi
	px := func(x float64) float64 { return padL + (x-xmin)/(xmax-xmin)*(chartW-padL-padR) }
	py := func(y float64) float64 { return chartH - padB - y/ytop*(chartH-padT-padB) }
	for _, t := range yTicks {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, padL, py(t), chartW-padR, py(t))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="11">%s</text>`, padL-4, py(t)+4, tickLabel(t))
	}
	for _, t := range niceTicks(xmin, xmax, 10) {
		if t >= xmin && t <= xmax {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11">%s</text>`, px(t), chartH-padB+14, tickLabel(t))
		}
	}
	for _, k := range buckets {
		if k.Count == 0 {
			continue
		}
		x0, x1 := px(k.Lo), px(k.Hi)
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s–%s: %d</title></rect>`,
			x0, py(float64(k.Count)), max(x1-x0-0.5, 0.5), chartH-padB-py(float64(k.Count)), color,
			tickLabel(k.Lo), tickLabel(k.Hi), k.Count)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func svgOpen(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`,
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<text x="%.1f" y="18" font-size="14" font-weight="bold">%s</text>`, padL, html.EscapeString(title))
}

func axes(b *strings.Builder, xLabel, yLabel string) {
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, padL, chartH-padB, chartW-padR, chartH-padB)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, padL, padT, padL, chartH-padB)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="12">%s</text>`, (padL+chartW-padR)/2, float64(chartH)-8, html.EscapeString(xLabel))
	fmt.Fprintf(b, `<text x="14" y="%.1f" text-anchor="middle" font-size="12" transform="rotate(-90 14 %.1f)">%s</text>`,
		(padT+chartH-padB)/2, (padT+chartH-padB)/2, html.EscapeString(yLabel))
}

func legend(b *strings.Builder, ss []Series) {
	x := chartW - padR - 10
	for i := len(ss) - 1; i >= 0; i-- {
		s := ss[i]
		w := float64(len(s.Name))*6.5 + 22
		x -= w
		if s.Dots {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="14" r="3" fill="%s"/>`, x+6, s.Color)
		} else {
			fmt.Fprintf(b, `<line x1="%.1f" y1="14" x2="%.1f" y2="14" stroke="%s" stroke-width="2"/>`, x, x+14, s.Color)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="18" font-size="11">%s</text>`, x+18, html.EscapeString(s.Name))
	}
}

// niceTicks returns round tick values covering [lo, hi] in about n steps.
func niceTicks(lo, hi float64, n int) []float64 {
	if !(hi > lo) {
		return []float64{lo, lo + 1}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	var out []float64
	for v := start; v < hi+step*0.999; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

func tickLabel(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.0f", v)
	default:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
	}
}
