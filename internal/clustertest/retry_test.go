package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// nodeProc is a `switchyard node` process.
type nodeProc struct {
	name string
	cmd  *exec.Cmd
	out  *logBuffer
	done chan struct{}
}

// StartNodeProc runs `switchyard node --name name args...` against the
// instance inst with key; it is killed when the test ends.
func (c *Cluster) StartNodeProc(inst *Instance, key, name string, args ...string) *nodeProc {
	c.t.Helper()
	n := &nodeProc{name: name, out: &logBuffer{}, done: make(chan struct{})}
	all := append([]string{"node", "--url", inst.WS(), "--api-key", key, "--name", name}, args...)
	n.cmd = exec.Command(binary, all...)
	n.cmd.Env = childEnv()
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	n.cmd.SysProcAttr = sysProcAttr()
	if err := n.cmd.Start(); err != nil {
		c.t.Fatalf("start node %s: %v", name, err)
	}
	go func() {
		_ = n.cmd.Wait()
		close(n.done)
	}()
	c.t.Cleanup(func() {
		n.Kill(c.t)
		if c.t.Failed() {
			c.t.Logf("--- node %s, args %q; its output:\n%s", name, all, n.out.String())
		}
	})
	return n
}

// Kill kills the node process with SIGKILL and waits for it to exit.
func (n *nodeProc) Kill(t testing.TB) { killWait(t, n.cmd, n.done, "node "+n.name) }

// retried is what a retried answer adds to GemmaNet's task result.
type retried struct {
	Status   string `json:"status"`
	Result   string `json:"result"`
	NodeID   string `json:"node_id"`
	Attempts int    `json:"attempts"`
	Retries  []struct {
		NodeID string `json:"node_id"`
		Reason string `json:"reason"`
	} `json:"retries"`
}

// activeTasks is the tasks the instance's listing shows running on nodes.
func activeTasks(ns []NodeView) int {
	n := 0
	for _, v := range ns {
		n += v.ActiveTasks
	}
	return n
}

// One instance, three `switchyard node --handler sleep` processes (1.5 s a
// task, 10 slots each), 24 plain and 6 streaming requests in flight (the
// streams have not streamed yet: their one chunk comes at the end), one
// node killed with SIGKILL: every request is answered 200 with a complete
// result, those of the killed node by another node (two attempts,
// node_disconnected).
func TestKilledNodeCostsARetryNotAnAnswer(t *testing.T) {
	c := New(t, Config{NoRedis: true})
	key := c.Account("alice")
	inst := c.Start("solo")
	var procs []*nodeProc
	for i := range 3 {
		procs = append(procs, c.StartNodeProc(inst, key, fmt.Sprintf("sleeper-%d", i), "--capability", "sleep",
			"--handler", "sleep", "--sleep-min", "1500ms", "--sleep-max", "1500ms", "--sleep-chunks", "1", "--max-concurrency", "10"))
	}
	nodes := inst.WaitNodes(10*time.Second, "three nodes", func(ns []NodeView) bool { return len(ns) == 3 })
	names := map[string]string{} // node id → process name
	for _, n := range nodes {
		names[n.NodeID] = n.Name
	}

	type answer struct {
		stream bool
		code   int
		body   []byte
		deltas string
		res    *sdk.TaskResult
		err    error
	}
	ctx := testCtx(t, 30*time.Second)
	cl := sdk.NewClient(inst.URL(), key, sdk.WithHTTPClient(c.HTTP))
	answers := make(chan answer, 30)
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i < 24 {
				r, err := inst.Do(ctx, http.MethodPost, "/api/v1/request", key, map[string]any{"task_type": "sleep", "content": fmt.Sprint(i)})
				if err != nil {
					answers <- answer{err: err}
					return
				}
				answers <- answer{code: r.Code, body: r.Body}
				return
			}
			var deltas strings.Builder
			res, err := cl.Stream(ctx, sdk.Request{TaskType: "sleep", Content: fmt.Sprint(i)}, func(d string) error {
				deltas.WriteString(d)
				return nil
			})
			answers <- answer{stream: true, deltas: deltas.String(), res: res, err: err}
		}()
	}
	t.Cleanup(wg.Wait)
	held := inst.WaitNodes(5*time.Second, "30 tasks running", func(ns []NodeView) bool { return activeTasks(ns) == 30 })
	victim, lost := procs[0], 0
	for _, n := range held {
		if names[n.NodeID] == victim.name {
			lost = n.ActiveTasks
		}
	}
	victim.Kill(t)
	killed := time.Now()

	ok, again := 0, 0
	for range 30 {
		a := waitFor(t, answers, 20*time.Second, "an answer")
		switch {
		case a.err != nil:
			t.Errorf("a request failed: %v", a.err)
		case a.stream:
			if a.res.Status != "completed" || a.deltas != "chunk 1/1\n" || !strings.HasPrefix(a.res.Result, "chunk 1/1\nslept ") {
				t.Errorf("a stream ended %+v after deltas %q; want the whole answer", a.res, a.deltas)
				continue
			}
			ok++
		default:
			var r retried
			if err := json.Unmarshal(a.body, &r); err != nil || a.code != 200 || r.Status != "completed" || !strings.HasPrefix(r.Result, "slept ") {
				t.Errorf("a request: HTTP %d %s; want 200 with its result", a.code, a.body)
				continue
			}
			ok++
			if r.Attempts == 2 {
				again++
				if names[r.Retries[0].NodeID] != victim.name || r.Retries[0].Reason != "node_disconnected" || names[r.NodeID] == victim.name {
					t.Errorf("a retried answer %s: want the first attempt lost on %s (node_disconnected), the answer from another", a.body, victim.name)
				}
			}
		}
	}
	t.Logf("%d of 30 answered 200 with a complete result, %s after the kill; the killed node held %d of them, %d plain ones say they were retried",
		ok, time.Since(killed).Round(time.Millisecond), lost, again)
	if ok != 30 {
		t.Fatalf("%d of 30 answered", ok)
	}
	if lost == 0 || again == 0 {
		t.Fatalf("the killed node held %d tasks and %d answers were retried: the test did not test a retry", lost, again)
	}
}

// Three instances, two nodes on A and two on C, 20 requests sent to B (every
// slot taken), A killed with SIGKILL: every request is answered 200 within
// 5 s, A's share by C's nodes once their slots free (instance_gone).
func TestKilledInstanceCostsARetryNotAnAnswer(t *testing.T) {
	OnEachRedis(t, testKilledInstanceCostsARetryNotAnAnswer)
}

func testKilledInstanceCostsARetryNotAnAnswer(t *testing.T, cfg Config) {
	c := New(t, cfg)
	key := c.Account("alice")
	a, b, cInst := c.Start("A"), c.Start("B"), c.Start("C")
	started := make(chan string, 64)
	work := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if r, ok := probe(task); ok {
			return r, nil
		}
		signal(started, task.ID)
		select {
		case <-ctx.Done():
			return sdk.Result{}, ctx.Err()
		case <-time.After(time.Second):
			return sdk.Result{Text: "done " + task.Content}, nil
		}
	})
	for i, inst := range []*Instance{a, a, cInst, cInst} {
		n := RunNode(t, sdk.NodeConfig{URL: inst.WS(), APIKey: key, Name: fmt.Sprintf("n%d-on-%s", i, inst.Name),
			Capabilities: []string{"work"}, MaxConcurrency: 5, Handler: work})
		n.WaitRegistered(t, 5*time.Second)
	}
	b.WaitNodes(5*time.Second, "four nodes", func(ns []NodeView) bool { return len(ns) == 4 })

	replies := make([]<-chan reply, 20)
	for i := range replies {
		replies[i] = requestAsync(t, b, key, "work", fmt.Sprint(i))
	}
	for range 20 {
		waitFor(t, started, 5*time.Second, "20 tasks started")
	}
	sent := time.Now()
	a.Kill()
	again := 0
	for i, ch := range replies {
		r := waitFor(t, ch, 10*time.Second, "an answer")
		var res retried
		if r.err != nil || r.Code != 200 || json.Unmarshal(r.Body, &res) != nil || res.Result != fmt.Sprint("done ", i) {
			t.Fatalf("request %d: %v; want 200 with its result", i, r)
		}
		if took := r.at.Sub(sent); took > 5*time.Second {
			t.Fatalf("request %d answered %s after the kill, want within 5s", i, took)
		}
		if res.Attempts == 2 {
			again++
			if res.Retries[0].Reason != "instance_gone" {
				t.Fatalf("request %d: %s; want its lost attempt's reason instance_gone", i, r.Body)
			}
		}
	}
	if again == 0 {
		t.Fatal("no answer was retried: the test did not test a retry")
	}
	t.Logf("20 of 20 answered 200 within 5 s of the kill; %d retried from A's nodes", again)
}

// resumableScript is a command for `switchyard node --handler exec` that
// writes "line 1" … "line 10", one every 200 ms, and on a resumed task only
// the lines after those the client has (the file $SWITCHYARD_RESUME_FILE
// names).
const resumableScript = `#!/usr/bin/env bash
set -euo pipefail
from=1
if [ -n "${SWITCHYARD_RESUME_FILE:-}" ]; then
	from=$(( $(wc -l <"$SWITCHYARD_RESUME_FILE") + 1 ))
fi
for i in $(seq "$from" 10); do
	printf 'line %d\n' "$i"
	sleep 0.2
done
`

// A stream cut after 5 of its 10 chunks (its node killed with SIGKILL)
// continues on the other node, which declared resume: the client gets the
// 10 chunks exactly once, in order. With the built-in sleep handler and
// with an exec command.
func TestKilledNodesStreamResumes(t *testing.T) {
	script := filepath.Join(t.TempDir(), "resumable.sh")
	if err := os.WriteFile(script, []byte(resumableScript), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		handler []string
		want    []string
	}{
		{"sleep", []string{"--handler", "sleep", "--sleep-min", "2s", "--sleep-max", "2s", "--sleep-chunks", "10"}, chunksOf("chunk %d/10\n")},
		{"exec", []string{"--handler", "exec", "--", script}, chunksOf("line %d\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(t, Config{NoRedis: true})
			key := c.Account("alice")
			inst := c.Start("solo")
			procs := map[string]*nodeProc{}
			for _, name := range []string{"first", "second"} {
				args := append([]string{"--capability", "count", "--resume"}, tc.handler...)
				procs[name] = c.StartNodeProc(inst, key, name, args...)
			}
			inst.WaitNodes(10*time.Second, "two nodes", func(ns []NodeView) bool { return len(ns) == 2 })

			ctx := testCtx(t, 20*time.Second)
			cl := sdk.NewClient(inst.URL(), key, sdk.WithHTTPClient(c.HTTP))
			fifth := make(chan struct{})
			var deltas []string
			type end struct {
				res *sdk.TaskResult
				err error
			}
			done := make(chan end, 1)
			go func() {
				res, err := cl.Stream(ctx, sdk.Request{TaskType: "count", Content: "go"}, func(d string) error {
					deltas = append(deltas, d)
					if len(deltas) == 5 {
						close(fifth)
					}
					return nil
				})
				done <- end{res, err}
			}()
			waitFor(t, fifth, 10*time.Second, "the stream's fifth chunk")
			var victim *nodeProc
			for _, n := range inst.Nodes() {
				if n.ActiveTasks == 1 {
					victim = procs[n.Name]
				}
			}
			if victim == nil {
				t.Fatal("no node is running the stream")
			}
			victim.Kill(t)
			e := waitFor(t, done, 15*time.Second, "the stream's end")
			if e.err != nil {
				t.Fatalf("the stream failed after %q: %v", deltas, e.err)
			}
			if !slices.Equal(deltas, tc.want) {
				t.Fatalf("the client read %q; want %q once each, in order", deltas, tc.want)
			}
			if !strings.HasPrefix(e.res.Result, strings.Join(tc.want, "")) || e.res.Status != "completed" {
				t.Fatalf("the stream's result %+v", e.res)
			}
			t.Logf("cut after 5 chunks on %s; the client read all 10 once, in order", victim.name)
		})
	}
}

// chunksOf is format filled with 1 … 10.
func chunksOf(format string) []string {
	out := make([]string, 10)
	for i := range out {
		out[i] = fmt.Sprintf(format, i+1)
	}
	return out
}
