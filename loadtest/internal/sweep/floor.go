package sweep

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/loadtest/internal/fleet"
	"github.com/switchyard-dev/switchyard/sdk"
)

// floorProc is the floor server's process, as the sweep sees it.
type floorProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
}

// startFloor starts the floor server as a process of this binary and waits
// for its address.
func startFloor() (*floorProc, error) {
	p := &floorProc{}
	var out io.ReadCloser
	var err error
	if p.cmd, p.stdin, out, err = cluster.StartChild(FloorServerArg); err != nil {
		return nil, fmt.Errorf("floor server: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, found := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !found {
		p.stop()
		return nil, fmt.Errorf("floor server: no address (read %q: %v)", line, err)
	}
	p.url = "http://" + addr
	return p, nil
}

// stop closes its stdin (it ends then) and waits for it.
func (p *floorProc) stop() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// floor runs the floor mode: the same client and echo nodes as local,
// through the floor server in a process of this binary.
func (r *runner) floor(ctx context.Context) error {
	cfg := r.cfg
	p, err := startFloor()
	if err != nil {
		return err
	}
	defer p.stop()
	capability := "loadtest." + cluster.RandHex(4) + ".echo"
	nodes, err := fleet.StartEcho(ctx, cfg.Nodes, cfg.NodeConcurrency, "ws"+strings.TrimPrefix(p.url, "http")+"/ws/node", []string{"floor"}, capability)
	if err != nil {
		return err
	}
	defer nodes.Stop()
	if err := nodes.AwaitRegistered(ctx, 30*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(r.progress, "[sweep floor] a bare forwarder (HTTP + one WebSocket hop, nothing else) at %s, %d echo nodes on it\n", p.url, cfg.Nodes)
	hc, dials := sweepHTTPClient()
	defer hc.CloseIdleConnections()
	target := &switchyardTarget{taskType: capability}
	for i := range max(cfg.ClientAccounts, 1) {
		target.clients = append(target.clients, sdk.NewClient(p.url, fmt.Sprintf("floor-key-%d", i), sdk.WithHTTPClient(hc)))
	}
	probe := &cluster.Probe{Procs: []cluster.ProbeProc{{Role: cluster.RoleInstance, Name: "floor forwarder", PID: p.cmd.Process.Pid}}}
	r.steps(ctx, config.ModeFloor, target, dials, meters{probe: probe})
	return nil
}
