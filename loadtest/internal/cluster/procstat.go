package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times. It is
// 100 on every Linux architecture Go supports (the kernel fixes it for
// user space whatever CONFIG_HZ is).
const clockTicks = 100

// Sample is one second of an instance's resource use.
type Sample struct {
	T      float64 `json:"t"`       // seconds since the run's start
	CPU    float64 `json:"cpu"`     // % of one core over the last interval
	RSSKiB int64   `json:"rss_kib"` // resident set size
}

// ProcCPU reads a process's user+system CPU time from /proc/<pid>/stat.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(b)
}

// parseProcStat reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line.
func parseProcStat(b []byte) (time.Duration, error) {
	st, err := parseStat(b)
	return st.self, err
}

// procStat is what a /proc/<pid>/stat line says of a process's CPU.
type procStat struct {
	ppid     int
	self     time.Duration // utime + stime
	children time.Duration // cutime + cstime: its children it has waited for
}

// parseStat reads ppid (field 4), utime, stime, cutime and cstime (fields
// 14 to 17) of a /proc/<pid>/stat line. The command name (field 2) is in
// parentheses and may contain spaces, so fields are counted after its
// closing one.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("procstat: malformed stat line")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[1] field 4 (ppid); utime is field 14.
	if len(f) < 15 {
		return procStat{}, errors.New("procstat: short stat line")
	}
	var v [5]int64
	var errs []error
	for k, j := range []int{1, 11, 12, 13, 14} {
		n, err := strconv.ParseInt(f[j], 10, 64)
		v[k] = n
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return procStat{}, fmt.Errorf("procstat: %w", err)
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	return procStat{ppid: int(v[0]), self: tick(v[1] + v[2]), children: tick(v[3] + v[4])}, nil
}

// ProcRSS reads VmRSS from /proc/<pid>/status, in KiB.
func ProcRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseRSS(f)
}

func parseRSS(r interface{ Read([]byte) (int, error) }) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
		return strconv.ParseInt(v, 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("procstat: no VmRSS (a zombie or a kernel thread)")
}

// Sampler samples the CPU and RSS of processes every second.
type Sampler struct {
	t0   time.Time
	pids []int

	mu      sync.Mutex
	samples [][]Sample // per pid
	last    []time.Duration
	lastAt  []time.Time
	gone    []bool
}

// NewSampler samples pids (0: not ours, never read), timing its samples
// from t0.
func NewSampler(t0 time.Time, pids []int) *Sampler {
	return &Sampler{t0: t0, pids: pids, samples: make([][]Sample, len(pids)),
		last: make([]time.Duration, len(pids)), lastAt: make([]time.Time, len(pids)), gone: make([]bool, len(pids))}
}

// Run samples until ctx ends. A process that is gone (killed) stops being
// sampled.
func (s *Sampler) Run(ctx context.Context) {
	s.sample()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample()
		}
	}
}

func (s *Sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, pid := range s.pids {
		if pid == 0 || s.gone[i] {
			continue
		}
		now := time.Now()
		cpu, err1 := ProcCPU(pid)
		rss, err2 := ProcRSS(pid)
		if err1 != nil || err2 != nil {
			s.gone[i] = true
			continue
		}
		if !s.lastAt[i].IsZero() {
			dt := now.Sub(s.lastAt[i])
			pct := 100 * float64(cpu-s.last[i]) / float64(dt)
			s.samples[i] = append(s.samples[i], Sample{T: stats.Round3(now.Sub(s.t0).Seconds()), CPU: stats.Round3(pct), RSSKiB: rss})
		}
		s.last[i], s.lastAt[i] = cpu, now
	}
}

// MarkGone stops sampling process i (it was killed; its pid may be reused).
func (s *Sampler) MarkGone(i int) {
	s.mu.Lock()
	s.gone[i] = true
	s.mu.Unlock()
}

// Result returns the samples of process i.
func (s *Sampler) Result(i int) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.samples[i]...)
}

// Latest returns the last sample of process i, if any.
func (s *Sampler) Latest(i int) (Sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.samples[i]); n > 0 && !s.gone[i] {
		return s.samples[i][n-1], true
	}
	return Sample{}, false
}
