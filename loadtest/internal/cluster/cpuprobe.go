package cluster

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The roles of the processes a Probe reads.
const (
	RoleInstance = "instance" // a switchyard instance (the floor mode: its forwarder)
	RoleRedis    = "redis"
	RolePostgres = "postgres"
	RoleLoadTest = "load test" // this process: its clients, echo nodes and, in the nats mode, the nats-server
)

// ProbeProc is one process a Probe reads.
type ProbeProc struct {
	Role string
	Name string
	PID  int
	// Tree adds the CPU of its children: those it has waited for (cutime
	// and cstime) and those alive. PostgreSQL's postmaster is one: every
	// connection is a process of its own, and one that ends between two
	// reads is counted in its parent's once reaped.
	Tree bool
}

// Probe reads how much CPU time its processes have used so far; the
// difference of two reads is what they used in between.
type Probe struct {
	Procs []ProbeProc
}

// Read returns the user+system CPU time of each process so far, in the
// order of Procs; -1 for one that could not be read (gone, or not on this
// machine).
func (p *Probe) Read() []time.Duration {
	out := make([]time.Duration, len(p.Procs))
	var kids map[int]time.Duration
	for i, pr := range p.Procs {
		st, err := readStat(pr.PID)
		if err != nil {
			out[i] = -1
			continue
		}
		out[i] = st.self
		if pr.Tree {
			if kids == nil {
				kids = childrenCPU()
			}
			out[i] += st.children + kids[pr.PID]
		}
	}
	return out
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, error) {
	if pid <= 0 {
		return procStat{}, fmt.Errorf("procstat: no pid")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// childrenCPU sums, per parent pid, the CPU time of every live process
// (its own, not its children's) by reading all of /proc.
func childrenCPU() map[int]time.Duration {
	m := map[int]time.Duration{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return m
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			m[st.ppid] += st.self
		}
	}
	return m
}

// procComm is /proc/<pid>/comm: the process's command name.
func procComm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ServerProcs finds the processes of the Redis (every master of a
// Redis Cluster) and the PostgreSQL the cluster's instances use, when they
// run on this machine: Redis by the process_id INFO gives, PostgreSQL as
// the parent of this program's own connection (the postmaster), each
// checked by its command name. It returns what it found and why the rest
// is missing.
func (c *Cluster) ServerProcs(ctx context.Context) ([]ProbeProc, []string) {
	var procs []ProbeProc
	var missing []string
	if c.rdb != nil {
		var mu sync.Mutex
		err := forEachMaster(ctx, c.rdb, func(ctx context.Context, m *redis.Client) error {
			info, err := m.Info(ctx, "server").Result()
			if err != nil {
				return err
			}
			pid := infoInt(info, "process_id")
			mu.Lock()
			defer mu.Unlock()
			if pid <= 0 || !strings.HasPrefix(procComm(pid), "redis") {
				missing = append(missing, fmt.Sprintf("the Redis at %s is not a process of this machine (process_id %d)", m.Options().Addr, pid))
				return nil
			}
			procs = append(procs, ProbeProc{Role: RoleRedis, Name: "redis-server " + m.Options().Addr, PID: pid})
			return nil
		})
		if err != nil {
			missing = append(missing, fmt.Sprintf("Redis: %v", err))
		}
	}
	if c.pg != nil {
		var backend int
		if err := c.pg.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
			missing = append(missing, fmt.Sprintf("PostgreSQL: %v", err))
		} else if st, err := readStat(backend); err != nil || !strings.HasPrefix(procComm(st.ppid), "postgres") {
			missing = append(missing, fmt.Sprintf("PostgreSQL is not a process of this machine (backend pid %d)", backend))
		} else {
			procs = append(procs, ProbeProc{Role: RolePostgres, Name: "postgres (the whole server)", PID: st.ppid, Tree: true})
		}
	}
	return procs, missing
}

// infoInt reads an integer field of a Redis INFO answer; 0 when absent.
func infoInt(info, field string) int {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
