package report

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// StepCPU is the CPU time each measured process of a step spent over its
// counted window (from the first counted request's due time until every
// request had its outcome), and per ok request: the sweep's headline
// figure, which the machine's load moves less than a latency.
type StepCPU struct {
	WindowS float64   `json:"window_s"`
	Procs   []ProcCPU `json:"procs"`
	// InstanceUs is the instances' µs per ok request together (the floor
	// mode: its forwarder's); 0 when the mode has none (nats).
	InstanceUs float64 `json:"instance_us_per_request,omitempty"`
	// VsFloor is InstanceUs over the floor mode's at the same rate; 0 when
	// there is none.
	VsFloor float64 `json:"instance_vs_floor,omitempty"`
}

// ProcCPU is one process's CPU over a step's counted window.
type ProcCPU struct {
	Role         string  `json:"role"` // cluster.RoleInstance, RoleRedis, RolePostgres, RoleLoadTest
	Name         string  `json:"name"`
	PID          int     `json:"pid"`
	CPUMs        float64 `json:"cpu_ms"`
	UsPerRequest float64 `json:"us_per_request"` // CPUMs over the step's ok requests
}

// NewStepCPU computes a step's figures from two reads of its probe
// (cluster.Probe.Read) over windowS seconds and ok requests; a process
// either read could not read is left out.
func NewStepCPU(procs []cluster.ProbeProc, before, after []time.Duration, windowS float64, ok int) *StepCPU {
	c := &StepCPU{WindowS: stats.Round3(windowS)}
	for i, p := range procs {
		if before[i] < 0 || after[i] < 0 {
			continue
		}
		ns := float64(after[i] - before[i])
		pc := ProcCPU{Role: p.Role, Name: p.Name, PID: p.PID, CPUMs: stats.Round3(ns / 1e6)}
		if ok > 0 {
			pc.UsPerRequest = stats.Round3(ns / 1e3 / float64(ok))
			if p.Role == cluster.RoleInstance {
				c.InstanceUs += ns / 1e3 / float64(ok)
			}
		}
		c.Procs = append(c.Procs, pc)
	}
	c.InstanceUs = stats.Round3(c.InstanceUs)
	return c
}

// roleUs is the µs per request of every process of role together, and
// whether there was one.
func (c *StepCPU) roleUs(role string) (float64, bool) {
	var sum float64
	found := false
	for _, p := range c.Procs {
		if p.Role == role {
			sum, found = sum+p.UsPerRequest, true
		}
	}
	return sum, found
}

// finishCPU fills each row's instance-to-floor ratio.
func (s *SweepReport) finishCPU() {
	for i := range s.Rows {
		r := &s.Rows[i]
		if r.CPU == nil || r.Mode == config.ModeFloor || r.Mode == config.ModeNATS {
			continue
		}
		if f := s.row(config.ModeFloor, r.Rate); f != nil && f.CPU != nil && f.CPU.InstanceUs > 0 && r.CPU.InstanceUs > 0 {
			r.CPU.VsFloor = stats.Round3(r.CPU.InstanceUs / f.CPU.InstanceUs)
		}
	}
}

// cpuCells are a row's CPU cells: instance(s), instance/floor, Redis,
// PostgreSQL, the load test, in µs per ok request ("—": not measured).
func (r SweepRow) cpuCells() []string {
	cells := []string{"—", "—", "—", "—", "—"}
	if r.CPU == nil || r.OK == 0 {
		return cells
	}
	for i, role := range []string{cluster.RoleInstance, "", cluster.RoleRedis, cluster.RolePostgres, cluster.RoleLoadTest} {
		if us, ok := r.CPU.roleUs(role); ok {
			cells[i] = fmt.Sprintf("%.0f", us)
		}
	}
	if r.CPU.VsFloor > 0 {
		cells[1] = fmt.Sprintf("%.2f×", r.CPU.VsFloor)
	}
	return cells
}

var cpuHeads = []string{"mode", "rate", "ok", "p50", "p95", "p99", "instance µs/req", "instance/floor", "redis µs/req", "postgres µs/req", "load test µs/req"}

// latencyCells are a row's p50, p95 and p99 ("—" without answers).
func (r SweepRow) latencyCells() []string {
	if r.Latency.N == 0 {
		return []string{"—", "—", "—"}
	}
	return []string{f3(r.Latency.P50), f3(r.Latency.P95), f3(r.Latency.P99)}
}

// writeSweepCPU is the text report's headline table: CPU per ok request
// of every process beside the latency.
func (s *SweepReport) writeSweepCPU(w io.Writer) {
	if !s.hasCPU() {
		return
	}
	tw := newTable(cpuHeads...)
	for _, row := range s.Rows {
		cells := append([]string{row.Mode, fmt.Sprintf("%g", row.Rate), fmt.Sprint(row.OK)}, row.latencyCells()...)
		tw.row(append(cells, row.cpuCells()...)...)
	}
	tw.write(w)
	fmt.Fprintln(w, "(CPU time of each process over the counted window, from the first counted request's due time until the")
	fmt.Fprintln(w, " last answer, over the ok requests; instance = switchyard's instances together, the floor's forwarder in the")
	fmt.Fprintln(w, " floor mode; redis and postgres are the whole servers, whoever else uses them; the load test's process")
	fmt.Fprintln(w, " holds the clients and the echo nodes, and in the nats mode the nats-server; latency in ms)")
	for _, row := range s.Rows {
		if row.CPU == nil {
			continue
		}
		var n int
		for _, p := range row.CPU.Procs {
			if p.Role == cluster.RoleInstance {
				n++
			}
		}
		if n < 2 {
			continue
		}
		var parts []string
		for _, p := range row.CPU.Procs {
			if p.Role == cluster.RoleInstance {
				parts = append(parts, fmt.Sprintf("%s %.0f µs", p.Name, p.UsPerRequest))
			}
		}
		fmt.Fprintf(w, "  %s at %g/s, per instance: %s\n", row.Mode, row.Rate, strings.Join(parts, ", "))
	}
	for _, row := range s.Rows {
		if row.InstanceAllocs > 0 {
			fmt.Fprintf(w, "  %s at %g/s, instance heap allocations per ok request: %.0f\n", row.Mode, row.Rate, row.InstanceAllocs)
		}
		if row.Redis != nil {
			fmt.Fprintf(w, "  %s at %g/s, Redis per ok request: %s\n", row.Mode, row.Rate, row.Redis.summary(5))
		}
	}
	for _, m := range s.CPUMissing {
		fmt.Fprintf(w, "  not measured: %s\n", m)
	}
	fmt.Fprintln(w)
}

// hasCPU reports whether any row measured its CPU.
func (s *SweepReport) hasCPU() bool {
	for _, r := range s.Rows {
		if r.CPU != nil {
			return true
		}
	}
	return false
}

// sweepCPUHTML is the HTML report's table of the same figures.
func (s *SweepReport) sweepCPUHTML() string {
	if !s.hasCPU() {
		return ""
	}
	var b strings.Builder
	b.WriteString("<h2>CPU per request</h2>\n<p>CPU time of each process over a step's counted window, over its ok requests (µs); latency in ms. Redis and PostgreSQL are the whole servers.</p>\n<table><tr>")
	for _, h := range cpuHeads {
		fmt.Fprintf(&b, "<th>%s</th>", html.EscapeString(h))
	}
	b.WriteString("</tr>\n")
	for _, row := range s.Rows {
		cells := append([]string{fmt.Sprintf("%g", row.Rate), fmt.Sprint(row.OK)}, row.latencyCells()...)
		fmt.Fprintf(&b, "<tr><td class=l>%s</td>", html.EscapeString(row.Mode))
		for _, c := range append(cells, row.cpuCells()...) {
			fmt.Fprintf(&b, "<td>%s</td>", html.EscapeString(c))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
	for _, row := range s.Rows {
		if row.InstanceAllocs > 0 {
			fmt.Fprintf(&b, "<p>%s at %g/s, instance heap allocations per ok request: %.0f</p>\n", html.EscapeString(row.Mode), row.Rate, row.InstanceAllocs)
		}
		if row.Redis != nil {
			fmt.Fprintf(&b, "<p>%s at %g/s, Redis per ok request: %s</p>\n", html.EscapeString(row.Mode), row.Rate, html.EscapeString(row.Redis.summary(5)))
		}
	}
	return b.String()
}
