package cluster

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 1000 123456789 4321 18446744073709551615\n"
	got, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want {
		t.Errorf("cpu time %v, want %v (utime 250 + stime 75 ticks)", got, want)
	}
	if _, err := parseProcStat([]byte("garbage")); err == nil {
		t.Error("no error for a malformed line")
	}
}

func TestParseRSS(t *testing.T) {
	status := "Name:\tswitchyard\nVmPeak:\t  900000 kB\nVmRSS:\t   31337 kB\nThreads:\t9\n"
	got, err := parseRSS(strings.NewReader(status))
	if err != nil || got != 31337 {
		t.Errorf("parseRSS = %d, %v; want 31337", got, err)
	}
	if _, err := parseRSS(strings.NewReader("Name:\tzombie\n")); err == nil {
		t.Error("no error without VmRSS")
	}
}

func TestSamplerReadsItsOwnProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	s := NewSampler(time.Now(), []int{os.Getpid()})
	s.sample()
	time.Sleep(20 * time.Millisecond)
	s.sample()
	got := s.Result(0)
	if len(got) != 1 || got[0].RSSKiB <= 0 || got[0].CPU < 0 {
		t.Errorf("samples %+v", got)
	}
}

func TestParseStatChildren(t *testing.T) {
	line := "4242 (postgres) S 77 4242 4242 0 -1 4194560 1234 0 0 0 250 75 30 20 20 0 12 0 1000 123456789 4321\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 77 || st.self != 3250*time.Millisecond || st.children != 500*time.Millisecond {
		t.Errorf("parseStat = %+v; want ppid 77, self 3.25s, children 0.5s", st)
	}
	if _, err := parseStat([]byte("1 (x) S 1 2 3")); err == nil {
		t.Error("no error for a short line")
	}
}

// A tree's CPU takes in a child once it has been waited for (cutime) and a
// child that is alive (read from its own stat).
func TestProbeTreeCountsChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	p := &Probe{Procs: []ProbeProc{{Role: RoleLoadTest, PID: os.Getpid(), Tree: true}, {Role: RoleRedis, PID: -5}}}
	before := p.Read()
	ownBefore, _ := ProcCPU(os.Getpid())
	if before[1] != -1 {
		t.Errorf("an unreadable process read as %v", before[1])
	}
	// A child that burns CPU, then ends: reaped, it is in our cutime.
	busy := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := busy.Run(); err != nil {
		t.Fatal(err)
	}
	used := busy.ProcessState.UserTime() + busy.ProcessState.SystemTime()
	own, _ := ProcCPU(os.Getpid())
	after := p.Read()
	// Its children's part grew by at least the child's time (less a tick
	// of rounding each way).
	if grew := (after[0] - own) - (before[0] - ownBefore); grew < used-20*time.Millisecond || used < 20*time.Millisecond {
		t.Errorf("the tree grew by %v beyond this process, the reaped child used %v", grew, used)
	}
	// A child alive, blocked on its stdin: its own time is in the tree's.
	alive := exec.Command("sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; read x")
	in, err := alive.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := alive.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close(); _ = alive.Wait() }()
	st, err := readStat(alive.Process.Pid) // first: the child may still be counting
	if err != nil {
		t.Fatal(err)
	}
	kids := childrenCPU()
	if kids[os.Getpid()] < st.self {
		t.Errorf("live children of this process: %v, less than the live child's own %v", kids[os.Getpid()], st.self)
	}
}

func TestInfoInt(t *testing.T) {
	info := "# Server\r\nredis_version:7.2.4\r\nprocess_id:4242\r\ntcp_port:6379\r\n"
	if got := infoInt(info, "process_id"); got != 4242 {
		t.Errorf("process_id %d", got)
	}
	if got := infoInt(info, "run_id"); got != 0 {
		t.Errorf("an absent field read as %d", got)
	}
}
