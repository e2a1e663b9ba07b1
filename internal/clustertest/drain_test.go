package clustertest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// Invariant 9: SIGTERM an instance while tasks run on its nodes, asked for
// at it and at another instance. It reports not ready while it drains, every
// task finishes (none lost, none 502), it exits 0 within a few seconds, its
// nodes reconnect (through a load balancer) to the other instance, which
// serves them, and it leaves the registry.
func TestSigtermDrainLosesNothing(t *testing.T) { OnEachRedis(t, testSigtermDrainLosesNothing) }

func testSigtermDrainLosesNothing(t *testing.T, cfg Config) {
	c := New(t, cfg)
	key := c.Account("alice")
	flags := []string{"--heartbeat-interval", "500ms", "--liveness-ttl", "2s", "--watch-interval", "100ms", "--drain-timeout", "10s"}
	a := c.Start("A", flags...)
	b := c.Start("B", flags...)
	aID, bID := a.ID(), b.ID()
	lb := NewBalancer(t, a.Addr, b.Addr) // A first: the nodes start there

	started := make(chan string, 64)
	sleeper := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if r, ok := probe(task); ok {
			return r, nil
		}
		signal(started, task.ID)
		select {
		case <-ctx.Done():
			return sdk.Result{}, ctx.Err()
		case <-time.After(time.Second):
			return sdk.Result{Text: "slept 1s: " + task.Content}, nil
		}
	})
	for i := range 3 {
		n := RunNode(t, sdk.NodeConfig{URL: lb.WS(), APIKey: key, Name: fmt.Sprintf("w%d", i),
			Capabilities: []string{"sleep"}, MaxConcurrency: 8, Handler: sleeper})
		n.WaitRegistered(t, 5*time.Second)
	}
	b.WaitNodes(3*time.Second, "3 nodes, all on A", func(ns []NodeView) bool {
		return len(ns) == 3 && ns[0].Instance == aID && ns[1].Instance == aID && ns[2].Instance == aID
	})

	var replies []<-chan reply
	for i := range 10 {
		replies = append(replies, requestAsync(t, b, key, "sleep", fmt.Sprintf("via B %d", i)),
			requestAsync(t, a, key, "sleep", fmt.Sprintf("via A %d", i)))
	}
	for i := range len(replies) {
		waitFor(t, started, 5*time.Second, fmt.Sprintf("handler start %d of %d", i+1, len(replies)))
	}

	terminated := time.Now()
	a.Terminate()
	// Readiness during the drain: polled, since there is no event for it.
	var saw503 bool
	for polling := true; polling; {
		select {
		case <-a.Exited():
			polling = false
			continue
		case <-time.After(20 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		code, h, err := a.Health(ctx)
		cancel()
		switch {
		case err != nil: // the listener has closed: the process is about to exit
		case code == http.StatusServiceUnavailable:
			if !strings.Contains(h.Reason, "draining") {
				t.Errorf("A's health while draining: 503 with reason %q, want it to say draining", h.Reason)
			}
			saw503 = true
		case code == http.StatusOK && saw503:
			t.Errorf("A's health went back to 200 during its drain")
		}
		if time.Since(terminated) > 8*time.Second {
			t.Fatalf("A still running 8s after SIGTERM")
		}
	}
	took := time.Since(terminated)
	if code := a.ExitCode(); code != 0 {
		t.Fatalf("A exited with %d after SIGTERM, want 0", code)
	}
	if took > 5*time.Second {
		t.Fatalf("A took %s to exit after SIGTERM, want at most 5s (tasks of 1s in flight)", took)
	}
	t.Logf("A drained and exited 0 in %s", took.Round(time.Millisecond))
	if !saw503 {
		t.Fatal("A's /api/health never answered 503 during its drain")
	}

	for i, ch := range replies {
		r := waitFor(t, ch, 10*time.Second, fmt.Sprintf("request %d", i))
		if r.err != nil || r.Code != http.StatusOK || !strings.Contains(string(r.Body), `"status":"completed"`) {
			t.Errorf("request %d (in flight at SIGTERM): %v; want 200 completed", i, r)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The nodes are B's now, and A is gone from the registry.
	Eventually(t, 5*time.Second, 25*time.Millisecond, func() (bool, string) {
		st := b.Status()
		return st.OnlineNodes == 3 && st.LocalNodes == 3 && st.Instances == 1, fmt.Sprintf("B's status %+v, want online_nodes 3, local_nodes 3, instances 1", st)
	})
	for _, v := range b.Nodes() {
		if v.Instance != bID {
			t.Fatalf("B lists %+v, want every node on B (%s)", v, bID)
		}
	}
	if n := lb.Routed(b.Addr); n < 3 {
		t.Fatalf("the balancer sent %d connections to B, want at least the 3 nodes'", n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r, err := b.Request(ctx, key, "sleep", "after the drain")
	if err != nil || r.Code != http.StatusOK || !strings.Contains(string(r.Body), "slept 1s: after the drain") {
		t.Fatalf("a request to B after the drain: %v %+v", err, r)
	}
}
