//go:build unix

package cluster

import (
	"fmt"
	"syscall"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
)

// RaiseFileLimit raises this process's RLIMIT_NOFILE to its hard limit
// (the switchyard instances started here inherit it), and refuses a run
// whose nodes cannot fit: every simulated node is an open socket here
// (and one on its instance, a separate process with the same limit), so
// the hard limit bounds how many nodes one machine can hold.
func RaiseFileLimit(cfg config.Config) error {
	need := uint64(cfg.SocketsPerProcess()) + cfg.FileReserve()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil // cannot tell: let the run find out
	}
	if need > lim.Max {
		// Only a privileged process may raise its hard limit.
		up := syscall.Rlimit{Cur: need, Max: need}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up); err != nil {
			most := int64(lim.Max) - int64(cfg.FileReserve())
			return fmt.Errorf("--nodes %d: the load test holds one socket per node, so it needs about %d open files "+
				"(%d nodes in one process + %d for its clients, Redis, PostgreSQL and logs), but RLIMIT_NOFILE's hard limit is %d "+
				"and this process may not raise it (%v). Run at most %d nodes on this machine, or raise the hard limit "+
				"(as root: `ulimit -Hn %d` in the shell that starts the load test; for a service, LimitNOFILE=). "+
				"The instances are separate processes with the same limit: on 1 instance, it holds all %d node sockets too",
				cfg.Nodes, need, cfg.SocketsPerProcess(), cfg.FileReserve(), lim.Max, err, max(most, 0), need, cfg.Nodes)
		}
		return nil
	}
	// The Go runtime raised the soft limit at start-up already, but gives
	// child processes the original one back unless the program sets the
	// limit itself: set it, so that the instances get it too.
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE to its hard limit %d: %w", lim.Max, err)
	}
	return nil
}
