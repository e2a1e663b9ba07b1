package cluster

import (
	"os"
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
