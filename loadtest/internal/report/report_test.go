package report

import (
	"bytes"
	"encoding/xml"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/ledger"
)

// sampleReport is a two-run report with a kill, as Run would return it.
func sampleReport() *Report {
	f := FaultReport{Kind: config.FaultKill, Instance: 1, AtMs: 30000, InFlight: 1}
	base := steadyRun(1, flat(100, 1), FaultReport{Kind: config.FaultKill, Skipped: "a 1-instance run has no other instance to fail over to"})
	two := steadyRun(2, flat(100, 1.5), f,
		mk(0, 0, 29900, 30480, ledger.OutcomeError, "node_disconnected", 1, 29905, 30000.3))
	two.Counters = map[string]map[string]float64{"i1": {`tasks_refusals_total{reason="no_free_slot"}`: 3}}
	two.Events = []Event{{T: 30, What: "kill -9 i2"}}
	rep := &Report{Tool: "switchyard loadtest", Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Finished: time.Date(2026, 11, 30, 12, 5, 0, 0, time.UTC), Profile: "smoke", Mode: "spawn",
		Shape: testCfg().Summary(), Params: ParamsOf(testCfg()), Host: Host{CPUs: 2, GoVersion: "go1.26", OS: "linux/amd64"},
		Runs: []*RunReport{base, two}}
	rep.Criteria = Evaluate(rep.Runs, config.DefaultBars)
	rep.Pass = Passed(rep.Criteria)
	rep.Notes = Notes(testCfg())
	return rep
}

func TestReportJSONRoundTrip(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rep) {
		var a, b bytes.Buffer
		_ = got.WriteJSON(&a)
		_ = rep.WriteJSON(&b)
		t.Fatalf("round trip changed the report:\n%s\nvs\n%s", firstDiff(a.String(), b.String()), "")
	}
	if n := len(got.Runs[1].Records); n != 101 {
		t.Errorf("%d requests in the JSON, want every one of the 101", n)
	}
}

func firstDiff(a, b string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			lo := max(i-200, 0)
			return a[lo:min(i+200, len(a))] + "\n---\n" + b[lo:min(i+200, len(b))]
		}
	}
	return "lengths differ"
}

func TestReportText(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	rep.WriteText(&buf)
	out := buf.String()
	for _, want := range []string{
		"instances", "hop +p95", // the table
		"SKIP  1 inst  killed instance's tasks", "fail over to",
		"PASS  2 inst  killed instance's tasks", "1 of 1 in-flight tasks as the bar says (0 ran again on another node and succeeded, 1 got 502",
		"PASS  2 inst  hop adds at p95", "+0.50 ms",
		`i1 counters: tasks_refusals_total{reason="no_free_slot"} 3`,
		"result: PASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
}

func TestReportHTMLHasThePlots(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, plot := range []string{"latency", "histogram", "CPU", "RSS"} {
		if n := strings.Count(page, `data-plot="`+plot+`"`); n != 2 {
			t.Errorf("%d %s plots, want one per run (2)", n, plot)
		}
	}
	if !strings.Contains(page, `class="marker"`) || !strings.Contains(page, "kill -9 instance 2") {
		t.Error("the latency plot has no marker at the kill")
	}
	if strings.Count(page, `<rect class="bar"`) < 2 {
		t.Error("the histograms have no bars")
	}
	if strings.Count(page, "<polyline") < 8 {
		t.Error("too few lines: latency per run, CPU and RSS per instance")
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http://cdn") || strings.Contains(page, "https://") {
		t.Error("the page must be self-contained: no script, nothing fetched")
	}
	// Every SVG must be well-formed XML.
	for rest := page; ; {
		i := strings.Index(rest, "<svg")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], "</svg>")
		if j < 0 {
			t.Fatal("unterminated svg")
		}
		svg := rest[i : i+j+len("</svg>")]
		d := xml.NewDecoder(strings.NewReader(svg))
		for {
			_, err := d.Token()
			if err != nil {
				if err.Error() != "EOF" {
					t.Fatalf("svg is not well-formed: %v\n%.300s", err, svg)
				}
				break
			}
		}
		rest = rest[i+j:]
	}
}
