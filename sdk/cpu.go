package sdk

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// cpuSampler reports the host's CPU use between two calls from /proc/stat.
// Where /proc/stat is missing (not Linux) it reports 0, as the heartbeat's
// cpu_percent only steers routing.
type cpuSampler struct {
	idle, total uint64
	ok          bool
}

func newCPUSampler() *cpuSampler {
	s := &cpuSampler{}
	s.idle, s.total, s.ok = readProcStat()
	return s
}

// percent returns the CPU use since the previous call (or since creation),
// in [0, 100].
func (s *cpuSampler) percent() float64 {
	idle, total, ok := readProcStat()
	prevIdle, prevTotal, prevOK := s.idle, s.total, s.ok
	s.idle, s.total, s.ok = idle, total, ok
	if !ok || !prevOK || total <= prevTotal || idle < prevIdle {
		return 0
	}
	busy := 1 - float64(idle-prevIdle)/float64(total-prevTotal)
	return min(max(busy*100, 0), 100)
}

func readProcStat() (idle, total uint64, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return 0, 0, false
	}
	return parseProcStat(line)
}

// parseProcStat reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal [guest guest_nice]. Idle time is idle
// plus iowait; guest time is already counted in user and nice.
func parseProcStat(line string) (idle, total uint64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	f = f[1:]
	for i := 0; i < len(f) && i < 8; i++ {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return idle, total, true
}
