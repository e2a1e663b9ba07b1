package clustertest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// asyncView is the part of an async task's view these tests read.
type asyncView struct {
	TaskID   string `json:"task_id"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	Result   string `json:"result"`
	Error    *struct {
		Code string `json:"code"`
	} `json:"error"`
}

func (i *Instance) submit(t *testing.T, key, taskType, content string) string {
	t.Helper()
	r, err := i.Do(t.Context(), http.MethodPost, "/api/v1/tasks", key, map[string]any{"task_type": taskType, "content": content})
	if err != nil || r.Code != http.StatusAccepted {
		t.Fatalf("POST /api/v1/tasks on %s: %v %v", i.Name, err, r)
	}
	var v asyncView
	if err := r.Decode(&v); err != nil || v.TaskID == "" {
		t.Fatalf("POST /api/v1/tasks: %v %+v", err, v)
	}
	return v.TaskID
}

// awaitTask long-polls a task on i until it is final, for at most d.
func (i *Instance) awaitTask(t *testing.T, key, id string, d time.Duration) asyncView {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		r, err := i.Do(ctx, http.MethodGet, "/api/v1/tasks/"+id+"?wait=10s", key, nil)
		cancel()
		var v asyncView
		if err == nil && r.Code == http.StatusOK && r.Decode(&v) == nil {
			switch v.Status {
			case "completed", "failed", "cancelled":
				return v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s not final on %s within %s: %v %v %+v", id, i.Name, d, err, r, v)
		}
	}
}

// The bar: an async task submitted on A while no node is free
// survives kill -9 of A (it waits in PostgreSQL, not in A), and completes
// on B's node once that is free.
func TestAsyncSurvivesKillOfItsInstance(t *testing.T) {
	c := New(t, Config{})
	key := c.Account("alice")
	a := c.Start("A")
	b := c.Start("B")

	release := make(chan struct{})
	started := make(chan string, 4)
	n := RunNode(t, sdk.NodeConfig{URL: b.WS(), APIKey: key, Name: "on-b", Capabilities: []string{"work"}, MaxConcurrency: 1,
		Handler: sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
			if r, ok := probe(task); ok {
				return r, nil
			}
			signal(started, task.ID)
			if task.Content == "blocker" {
				select {
				case <-release:
				case <-ctx.Done():
					return sdk.Result{}, ctx.Err()
				}
			}
			return sdk.Result{Text: "done: " + task.Content}, nil
		})})
	n.WaitRegistered(t, 5*time.Second)

	blocker := b.submit(t, key, "work", "blocker")
	if got := waitFor(t, started, 10*time.Second, "the blocker on B's node"); got != blocker {
		t.Fatalf("the node started %s, want the blocker %s", got, blocker)
	}
	id := a.submit(t, key, "work", "survivor") // the only node is busy: it waits
	a.Kill()
	close(release)
	v := b.awaitTask(t, key, id, 30*time.Second)
	if v.Status != "completed" || v.Result != "done: survivor" || v.Attempts != 1 {
		t.Fatalf("the task submitted on the killed instance ended %+v", v)
	}
}

// The bar: 1,000 async tasks through 10 nodes on three instances,
// one instance killed mid-run: every task ends completed (or failed
// instance_lost, only once its retry was spent), none lost, and no task
// ran on nodes more times than its recorded attempts.
func TestAsyncThousandWithAKill(t *testing.T) {
	const total = 1000
	c := New(t, Config{})
	key := c.Account("alice")
	insts := []*Instance{c.Start("A", "--max-nodes-per-account", "20"), c.Start("B", "--max-nodes-per-account", "20"), c.Start("C", "--max-nodes-per-account", "20")}

	var mu sync.Mutex
	runs := map[string]int{}
	var done atomic.Int64
	handler := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if r, ok := probe(task); ok {
			return r, nil
		}
		mu.Lock()
		runs[task.ID]++
		mu.Unlock()
		select {
		case <-time.After(time.Duration(50+task.ID[len(task.ID)-1]%5*10) * time.Millisecond):
		case <-ctx.Done():
			return sdk.Result{}, ctx.Err()
		}
		done.Add(1)
		return sdk.Result{Text: "ok"}, nil
	})
	var nodes []*Node
	for i := range 10 {
		inst := insts[i%3] // A: 4 nodes, B: 3, C: 3
		nodes = append(nodes, RunNode(t, sdk.NodeConfig{URL: inst.WS(), APIKey: key, Name: fmt.Sprint("n", i),
			Capabilities: []string{"work"}, MaxConcurrency: 4, Handler: handler}))
	}
	for _, n := range nodes {
		n.WaitRegistered(t, 10*time.Second)
	}

	// C is killed once a quarter of the tasks are done, while the rest are
	// still being submitted or queued.
	killed := async(t, func(ctx context.Context) int64 {
		for done.Load() < total/4 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		insts[2].Kill()
		return done.Load()
	})
	ids := make([]string, total)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += 8 {
				inst := insts[i%2] // submitted on A and B
				r, err := inst.Do(t.Context(), http.MethodPost, "/api/v1/tasks", key, map[string]any{"task_type": "work", "content": fmt.Sprint(i)})
				var v asyncView
				if err != nil || r.Code != http.StatusAccepted || r.Decode(&v) != nil {
					t.Errorf("submit %d: %v %v", i, err, r)
					return
				}
				ids[i] = v.TaskID
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("killed C with %d of %d tasks done", waitFor(t, killed, 30*time.Second, "a quarter of the tasks done"), total)

	counts := map[string]int{}
	retried := 0
	for _, id := range ids {
		v := insts[0].awaitTask(t, key, id, 50*time.Second)
		counts[v.Status]++
		mu.Lock()
		ran := runs[id]
		mu.Unlock()
		switch {
		case v.Status == "failed" && v.Error != nil && v.Error.Code == "instance_lost" && v.Attempts >= 2:
		case v.Status != "completed":
			t.Errorf("task %s ended %+v", id, v)
		}
		if ran > v.Attempts {
			t.Errorf("task %s ran %d times on nodes, with %d attempts recorded", id, ran, v.Attempts)
		}
		if v.Attempts > 1 {
			retried++
		}
	}
	t.Logf("ends: %v; %d tasks retried after the kill", counts, retried)
}
