package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

// HelperArg is the first argument that runs the binary as a helper
// (RunHelper).
const HelperArg = "fleet-helper"

// helperSpec is what a helper process is told (as JSON, its second
// argument): nodes From..To-1 of the fleet, node i connected to URLs[i mod
// len] with Keys[i mod len], named Prefix+i, serving Capability only — the
// idle fleet's; the loaded window's requests go to the parent's nodes,
// whose handlers tell the ledger what they run. Node i connects i/Rate
// seconds after the helper starts, as the parent paces its own.
type helperSpec struct {
	URLs       []string `json:"urls"`
	Keys       []string `json:"keys"`
	Prefix     string   `json:"prefix"`
	Capability string   `json:"capability"`
	From       int      `json:"from"`
	To         int      `json:"to"`
	Rate       float64  `json:"rate"`
}

// helperProc is one running helper, as the parent sees it.
type helperProc struct {
	spec       helperSpec
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	registered atomic.Int64 // as it last said
	done       chan struct{}
}

// startHelpers starts the helper processes for nodes from..nodes-1.
func startHelpers(spec helperSpec, nodes, per int) ([]*helperProc, error) {
	var hs []*helperProc
	for from := spec.From; from < nodes; from += per {
		s := spec
		s.From, s.To = from, min(from+per, nodes)
		arg, _ := json.Marshal(s)
		h := &helperProc{spec: s, done: make(chan struct{})}
		var out io.ReadCloser
		var err error
		h.cmd, h.stdin, out, err = cluster.StartChild(HelperArg, string(arg))
		if err != nil {
			stopHelpers(hs)
			return nil, fmt.Errorf("fleet helper for nodes %d-%d: %w", s.From, s.To-1, err)
		}
		go func() { // reads "registered N" lines until the helper ends
			defer close(h.done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "registered "); ok {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						h.registered.Store(n)
					}
				}
			}
		}()
		hs = append(hs, h)
	}
	return hs, nil
}

// stopHelpers closes the helpers' stdin (their signal to stop) and waits.
func stopHelpers(hs []*helperProc) {
	for _, h := range hs {
		_ = h.stdin.Close()
	}
	for _, h := range hs {
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.done
		}
		_ = h.cmd.Wait()
	}
}

// RunHelper is the helper process: it connects its nodes, prints how
// many have registered (at most ten times a second, when it changes), and
// stops them all once its stdin closes.
func RunHelper(arg string, stdin io.Reader, stdout io.Writer) error {
	var s helperSpec
	if err := json.Unmarshal([]byte(arg), &s); err != nil {
		return fmt.Errorf("fleet-helper: bad spec: %w", err)
	}
	if len(s.URLs) == 0 || len(s.Keys) == 0 || s.To <= s.From || s.Rate <= 0 {
		return errors.New("fleet-helper: the spec needs urls, keys, from < to and a rate")
	}
	if err := cluster.RaiseFileLimit(config.Config{Nodes: s.To - s.From}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the parent closes stdin to stop the helper
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	var registered atomic.Int64
	var wg sync.WaitGroup
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	echo := handlers.Sleep(0, 0, 0)
	start := time.Now()
	for i := s.From; i < s.To; i++ {
		node, err := sdk.NewNode(sdk.NodeConfig{
			URL: s.URLs[i%len(s.URLs)], APIKey: s.Keys[i%len(s.Keys)], Name: s.Prefix + strconv.Itoa(i),
			Capabilities: []string{s.Capability}, Handler: echo, Logger: quiet,
			OnRegistered: func(string) { registered.Add(1) },
		})
		if err != nil {
			return fmt.Errorf("fleet-helper: node %d: %w", i, err)
		}
		due := start.Add(time.Duration(float64(i) / s.Rate * float64(time.Second)))
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(due)):
			}
			_ = node.Run(ctx)
		})
	}
	last := int64(-1)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		if n := registered.Load(); n != last {
			if _, err := fmt.Fprintf(stdout, "registered %d\n", n); err != nil {
				cancel()
				break
			}
			last = n
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	wg.Wait()
	return nil
}
