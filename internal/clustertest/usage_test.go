package clustertest

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/store"
)

// usageNode is a raw GemmaNet-style node (it declares no task_cancel, so it
// runs every task it is given to its end and answers it) that derives the
// usage it reports from each task's content and adds up, per tag (the
// content's prefix before ':'), what it sent: the figures the usage API
// must show.
type usageNode struct {
	n *nodetest.Node

	mu   sync.Mutex
	sent map[string]*store.UsageTotals // by tag

	held    atomic.Int64  // "hold" tasks received
	release chan struct{} // closed: answer the "hold" tasks
	late    atomic.Int64  // answers sent after release
	pending atomic.Int64  // tasks received, not answered yet
	errs    atomic.Int64  // answers that could not be sent
	wg      sync.WaitGroup
}

// serve answers each task_assign from a goroutine of its own, after a
// few milliseconds of work (a "hold" task: after release), until the
// connection ends.
func (u *usageNode) serve() {
	defer u.wg.Done()
	for {
		var m nodetest.Msg
		select {
		case m = <-u.n.Msgs:
		case <-u.n.Closed:
			return
		}
		if m.MsgType != "task_assign" {
			continue
		}
		id, content := m.TaskID(), m.Payload["content"].(string)
		tag, _, _ := strings.Cut(content, ":")
		u.wg.Add(1)
		u.pending.Add(1)
		go func() {
			defer u.wg.Done()
			defer u.pending.Add(-1)
			work := time.Duration(1+len(content)%5) * time.Millisecond
			if strings.Contains(content, ":hold:") {
				u.held.Add(1)
				<-u.release
				u.late.Add(1)
			} else {
				time.Sleep(work) // the node's own work, not a wait for an event
			}
			// No more tokens than bytes handled (invariant 18): the
			// answer is as long as its completion.
			prompt, completion := len(content), 2*len(content)+1
			result := strings.Repeat(strings.ToUpper(content), 2) + "."
			err := u.n.Send("task_result", map[string]any{"task_id": id, "node_id": u.n.ID, "status": "completed",
				"result": result, "processing_time_ms": work.Milliseconds(),
				"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion}})
			if err != nil {
				u.errs.Add(1)
				return
			}
			u.mu.Lock()
			s := u.sent[tag]
			if s == nil {
				s = &store.UsageTotals{}
				u.sent[tag] = s
			}
			s.PromptTokens += int64(prompt)
			s.CompletionTokens += int64(completion)
			s.NodeMs += work.Milliseconds()
			s.ResultBytes += int64(len(result))
			u.mu.Unlock()
		}()
	}
}

// The usage API's totals equal what the nodes reported, per key, exactly,
// when the instance where half the requests landed is killed with -9 in
// the middle of the run, some of its tasks still on the nodes: 1,000
// requests of two keys across instances A and B, the nodes on B. B meters
// each answer its nodes send, whichever instance asked and whether or not
// it is still there to hear it.
func TestUsageExactWhenARequesterDies(t *testing.T) { OnEachRedis(t, testUsageExactWhenARequesterDies) }

func testUsageExactWhenARequesterDies(t *testing.T, cfg Config) {
	c := New(t, cfg)
	keys := map[string]string{"alice": c.Account("alice"), "bob": c.Account("bob")}
	a := c.Start("A")
	b := c.Start("B")

	release := make(chan struct{})
	var nodes []*usageNode
	for i := range 4 {
		reg := nodetest.Reg(keys["alice"], fmt.Sprintf("gemma-%d", i), "work")
		reg["max_concurrency"] = 16
		u := &usageNode{n: nodetest.Connect(t, b.WS(), reg), sent: map[string]*store.UsageTotals{}, release: release}
		u.wg.Add(1)
		go u.serve()
		nodes = append(nodes, u)
	}
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		for _, u := range nodes {
			_ = u.n.Conn.CloseNow()
			u.wg.Wait()
		}
	})
	a.WaitNodes(5*time.Second, "B's four nodes", func(ns []NodeView) bool { return len(ns) == 4 })

	ctx := testCtx(t, 2*time.Minute)
	const total, held = 1000, 20
	var bFailed atomic.Int64
	// send sends requests from..to-1 from 16 workers; request i of tag
	// alice or bob by its parity, to the instance pick(i) gives.
	send := func(from, to int, pick func(i int) *Instance) {
		var next atomic.Int64
		next.Store(int64(from))
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < to; i = int(next.Add(1) - 1) {
					tag := []string{"alice", "bob"}[i%2]
					content := fmt.Sprintf("%s:%d:%s", tag, i, strings.Repeat("x", i%37))
					in := pick(i)
					r, err := in.Request(ctx, keys[tag], "work", content)
					if in == b && (err != nil || r.Code != http.StatusOK) {
						bFailed.Add(1)
						t.Errorf("request %d to B: %v %+v", i, err, r)
					}
				}
			}()
		}
		wg.Wait()
	}
	either := func(i int) *Instance { return []*Instance{a, b}[i/2%2] }

	send(0, total/2, either)
	// Tasks A asked for, still on the nodes when A dies.
	var holds []<-chan reply
	for i := range held {
		tag := []string{"alice", "bob"}[i%2]
		holds = append(holds, requestAsync(t, a, keys[tag], "work", fmt.Sprintf("%s:hold:%d", tag, i)))
	}
	Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		var n int64
		for _, u := range nodes {
			n += u.held.Load()
		}
		return n == held, fmt.Sprintf("%d of A's %d held tasks reached the nodes", n, held)
	})
	a.Kill()
	close(release)
	for _, h := range holds {
		if r := waitFor(t, h, 10*time.Second, "a request to the killed A"); r.err == nil && r.Code == http.StatusOK {
			t.Errorf("a held request to A was answered after A was killed: %v", r)
		}
	}
	send(total/2+held, total, func(int) *Instance { return b })

	// Every answer sent (B's requests returned with theirs; A's held
	// tasks were released), then what the nodes reported, per key.
	Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		var n int64
		for _, u := range nodes {
			n += u.pending.Load()
		}
		return n == 0, fmt.Sprintf("%d answers not sent yet", n)
	})
	want := map[string]store.UsageTotals{}
	var late, errs int64
	for _, u := range nodes {
		late, errs = late+u.late.Load(), errs+u.errs.Load()
		u.mu.Lock()
		for tag, s := range u.sent {
			w := want[tag]
			w.PromptTokens += s.PromptTokens
			w.CompletionTokens += s.CompletionTokens
			w.NodeMs += s.NodeMs
			w.ResultBytes += s.ResultBytes
			want[tag] = w
		}
		u.mu.Unlock()
	}
	if late != held || errs != 0 {
		t.Fatalf("the nodes answered %d of A's %d held tasks after A died (%d sends failed)", late, held, errs)
	}
	for _, tag := range []string{"alice", "bob"} {
		Eventually(t, 20*time.Second, 50*time.Millisecond, func() (bool, string) {
			var v struct {
				Rows  []store.UsageRow  `json:"rows"`
				Total store.UsageTotals `json:"total"`
			}
			r, err := b.Do(ctx, http.MethodGet, "/api/v1/usage?group_by=key", keys[tag], nil)
			if err != nil || r.Code != http.StatusOK || r.Decode(&v) != nil {
				return false, fmt.Sprintf("GET /api/v1/usage as %s: %v %+v", tag, err, r)
			}
			got := v.Total
			got.Requests, got.Completed, got.ContentBytes = 0, 0, 0 // the requesters' figures: A's last ones died with it
			return len(v.Rows) == 1 && got == want[tag], fmt.Sprintf("%s's usage by key %+v, the nodes reported %+v", tag, v.Rows, want[tag])
		})
	}
	t.Logf("usage equals what the nodes reported: alice %+v, bob %+v; %d requests to B failed", want["alice"], want["bob"], bFailed.Load())
}
