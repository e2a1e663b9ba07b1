package sweep

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/fleet"
	"github.com/switchyard-dev/switchyard/sdk"
)

// The floor server answers each request with its own echo through a node
// with a free slot, refuses a request without an API key, and stops whole
// when its stdin closes (TestMain's leak check fails on a goroutine left).
func TestFloorServer(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- RunFloorServer(stdinR, stdoutW) }()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("first line %q, %v", line, err)
	}
	url := "http://" + addr

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodes, err := fleet.StartEcho(ctx, 3, 2, "ws://"+addr+"/ws/node", []string{"k"}, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes.AwaitRegistered(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	hc, _ := sweepHTTPClient()
	target := &switchyardTarget{taskType: "echo"}
	for i := range 2 {
		target.clients = append(target.clients, sdk.NewClient(url, fmt.Sprintf("key-%d", i), sdk.WithHTTPClient(hc)))
	}
	// More requests at once than the 6 slots: the rest wait in line.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			body := fmt.Sprintf("request %d", i)
			got, err := target.do(ctx, body)
			if err == nil && got != body {
				err = fmt.Errorf("echo of %q: %q", body, got)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	resp, err := hc.Post(url+"/api/v1/request", "application/json", strings.NewReader(`{"task_type":"echo","content":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without an API key: %d, want 401", resp.StatusCode)
	}

	hc.CloseIdleConnections()
	nodes.Stop()
	_ = stdinW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("runFloorServer: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the floor server did not stop when its stdin closed")
	}
}
