package report

import (
	"fmt"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
)

// Notes explain choices that a reader of the figures should know.
func Notes(cfg config.Config) []string {
	var n []string
	if cfg.Fault != config.FaultNone {
		for _, i := range cfg.Instances {
			if i == 1 {
				n = append(n, "the 1-instance run has no other instance to fail over to: its fault is skipped")
				break
			}
		}
		n = append(n, "at the fault the clients stop sending to the faulty instance, as a load balancer would; its nodes reconnect to the others 0.5–1 s later (after a drain: once it has exited)")
		n = append(n, fmt.Sprintf("the hop and memory figures leave out the fault window (from the signal until %v after the instance was gone); the overhead including it is printed per run", cfg.Settle))
	}
	if cfg.Fleet {
		return append(n, fleetNotes(cfg)...)
	}
	if cfg.Duration < cfg.MemMinStretch {
		n = append(n, fmt.Sprintf("memory growth is judged on steady stretches of at least %v (--mem-min-stretch); this run's are shorter, so it is printed but not judged", cfg.MemMinStretch))
	}
	if cfg.Rate != 100 {
		n = append(n, fmt.Sprintf("the CPU bar is for 100 requests/s; this run's %g requests/s are scaled: cpu%% × 100/%g", cfg.Rate, cfg.Rate))
	}
	if !cfg.Spawn() {
		n = append(n, "target mode: CPU and memory are not measured (the processes are not ours); the fault is not injected")
	}
	return n
}

// fleetNotes explain the fleet profile's figures.
func fleetNotes(cfg config.Config) []string {
	n := []string{
		"fleet profile: CPU is each process's user+system time over the window (/proc/<pid>/stat) divided by its length, % of one core; RSS from /proc/<pid>/status",
		"Redis commands/s is total_commands_processed (INFO stats) at the window's end minus its start, summed over every server (masters and replicas of a cluster); it includes the load test's own INFO, one per server per second",
		"the loaded window's CPU and Redis figures are reported, not judged; its requests are judged: every one must get exactly one outcome, and succeed",
	}
	if local := cfg.LocalNodes(); local < cfg.Nodes {
		n = append(n, fmt.Sprintf("the load test's own process holds %d of the %d nodes (Go SDK agents), the ones the loaded window's requests go to; "+
			"helper processes (at most %d nodes each, --nodes-per-process) hold the other %d, idle throughout (a task type of their own). "+
			"The load test's CPU is its own process's; all of them share this machine's cores with the instances", local, cfg.Nodes, cfg.NodesPerProcess, cfg.Nodes-local))
	} else {
		n = append(n, fmt.Sprintf("the load test's own process holds all %d nodes (Go SDK agents); its CPU, printed beside the instances', shares this machine's cores with them", cfg.Nodes))
	}
	if cfg.Spawn() && !cfg.RedisCluster {
		n = append(n, fmt.Sprintf("the Redis at %s was not started by the load test and may carry other clients' traffic (other tests, other programs): all of it is counted, so its commands/s are an upper bound for switchyard's own", cfg.RedisURL))
	}
	if !cfg.Spawn() {
		n = append(n, "target mode: CPU, memory and Redis are not measured (the processes and the Redis are not ours)")
	}
	return n
}
