package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/sdk"
)

// A request that lands on B is served by a node connected to A, plain and
// streaming; the rating of the task works once and conflicts after, on
// either instance; B's node list and status count the node A holds.
func TestCrossInstancePlainStreamRating(t *testing.T) {
	OnEachRedis(t, testCrossInstancePlainStreamRating)
}

func testCrossInstancePlainStreamRating(t *testing.T, cfg Config) {
	c := New(t, cfg)
	key := c.Account("alice")
	a := c.Start("A")
	b := c.Start("B")

	// An echo that, when asked to stream, sends its answer as three chunks.
	handler := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
		if !task.Stream {
			return sdk.Result{Text: "echo: " + task.Content}, nil
		}
		var all strings.Builder
		for i := 1; i <= 3; i++ {
			part := fmt.Sprintf("%s #%d;", task.Content, i)
			if err := emit(part); err != nil {
				return sdk.Result{}, err
			}
			all.WriteString(part)
		}
		return sdk.Result{Text: all.String()}, nil
	})
	n := RunNode(t, sdk.NodeConfig{URL: a.WS(), APIKey: key, Name: "n1", Capabilities: []string{"echo"}, Handler: handler})
	nodeID := n.WaitRegistered(t, 5*time.Second)
	aID, bID := a.ID(), b.ID()
	if aID == bID {
		t.Fatalf("A and B report the same instance_id %s", aID)
	}

	listed := b.WaitNodes(3*time.Second, "the node, held by A", func(ns []NodeView) bool { return len(ns) == 1 })
	if v := listed[0]; v.NodeID != nodeID || v.Name != "n1" || v.Instance != aID || !slices.Equal(v.Capabilities, []string{"echo"}) {
		t.Fatalf("B lists %+v, want node %s named n1 with capability echo on A (%s)", v, nodeID, aID)
	}
	st := b.Status()
	if st.OnlineNodes != 1 || st.LocalNodes != 0 || st.Instances != 2 || st.Mode != "multi-instance" || !st.Ready || st.Store != "postgres" {
		t.Fatalf("B's status: %+v; want online_nodes 1, local_nodes 0, instances 2, mode multi-instance, ready, store postgres", st)
	}

	ctx := testCtx(t, 15*time.Second)
	cb := sdk.NewClient(b.URL(), key, sdk.WithHTTPClient(c.HTTP))
	res, err := cb.Request(ctx, sdk.Request{TaskType: "echo", Content: "hello"})
	if err != nil {
		t.Fatalf("plain request through B: %v", err)
	}
	if res.Status != "completed" || res.Result != "echo: hello" || res.NodeID != nodeID {
		t.Fatalf("plain request through B: %+v, want completed \"echo: hello\" from %s", res, nodeID)
	}

	var deltas []string
	sres, err := cb.Stream(ctx, sdk.Request{TaskType: "echo", Content: "s"}, func(d string) error {
		deltas = append(deltas, d)
		return nil
	})
	if err != nil {
		t.Fatalf("stream through B: %v (deltas so far %q)", err, deltas)
	}
	if want := []string{"s #1;", "s #2;", "s #3;"}; !slices.Equal(deltas, want) {
		t.Fatalf("stream deltas %q, want %q in order", deltas, want)
	}
	if sres.Status != "completed" || sres.NodeID != nodeID || sres.Result != "s #1;s #2;s #3;" {
		t.Fatalf("stream's done event: %+v", sres)
	}

	// The task's record, at B: requested at B, owned by A.
	var rec struct {
		Status    string   `json:"status"`
		NodeIDs   []string `json:"node_ids"`
		Requester string   `json:"requester_instance"`
		Owner     string   `json:"owner_instance"`
	}
	r, err := b.Do(ctx, http.MethodGet, "/api/v1/tasks/"+res.TaskID, key, nil)
	if err != nil || r.Code != http.StatusOK || r.Decode(&rec) != nil {
		t.Fatalf("GET /api/v1/tasks/%s on B: %v %+v", res.TaskID, err, r)
	}
	if rec.Status != "completed" || !slices.Equal(rec.NodeIDs, []string{nodeID}) || rec.Requester != bID || rec.Owner != aID {
		t.Fatalf("task record %+v, want completed by %s, requester %s (B), owner %s (A)", rec, nodeID, bID, aID)
	}

	rr, err := cb.Rate(ctx, res.TaskID, 5)
	if err != nil {
		t.Fatalf("first rating on B: %v", err)
	}
	if rr.Status != "rated" || rr.Rating != 5 || !slices.Equal(rr.NodeIDs, []string{nodeID}) {
		t.Fatalf("first rating on B: %+v", rr)
	}
	_, err = cb.Rate(ctx, res.TaskID, 4)
	wantAPIError(t, "second rating on B", err, http.StatusConflict, "already_rated")
	// The ratings live in the shared database: A refuses a second one too.
	ca := sdk.NewClient(a.URL(), key, sdk.WithHTTPClient(c.HTTP))
	_, err = ca.Rate(ctx, res.TaskID, 3)
	wantAPIError(t, "second rating on A", err, http.StatusConflict, "already_rated")
}

// nextTask returns the next task_assign a raw node gets, passing over the
// benchmark probe the server sends every new node.
func nextTask(t *testing.T, n *nodetest.Node) nodetest.Msg {
	t.Helper()
	for {
		m := n.Recv(5 * time.Second)
		switch m.MsgType {
		case "task_assign":
			return m
		case "benchmark":
		default:
			t.Fatalf("got %s %v, want task_assign", m.MsgType, m.Payload)
		}
	}
}

// wantAPIError fails unless err is an *sdk.APIError with this status and code.
func wantAPIError(t *testing.T, what string, err error, status int, code string) *sdk.APIError {
	t.Helper()
	var ae *sdk.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("%s: error %v, want HTTP %d %s", what, err, status, code)
	}
	if ae.Status != status || ae.Code != code {
		t.Fatalf("%s: HTTP %d %s (%s), want %d %s", what, ae.Status, ae.Code, ae.Message, status, code)
	}
	return ae
}

// Invariant 1 across instances: a node identity has one connection in the
// cluster. The newest wins: the older connection, at another instance, is
// closed with 4000 within a second, and every instance lists the node once,
// at the new owner, which is the one that gets the work.
//
// The instances keep the default heartbeat (5 s): the claim refresh, which
// would close a stale connection at the next heartbeat, must not be what
// meets the 1 s deadline.
func TestDuplicateNodeAcrossInstances(t *testing.T) { OnEachRedis(t, testDuplicateNodeAcrossInstances) }

func testDuplicateNodeAcrossInstances(t *testing.T, cfg Config) {
	c := New(t, cfg)
	key := c.Account("alice")
	a := c.Start("A")
	b := c.Start("B")
	bID := b.ID()

	// One after the other: A's connection, then B's.
	reg := nodetest.Reg(key, "dup", "echo")
	na := nodetest.Connect(t, a.WS(), reg)
	nb := nodetest.Connect(t, b.WS(), reg) // returns at B's node_registered
	if code := na.WaitClosed(time.Second); code != websocket.StatusCode(4000) {
		t.Fatalf("A's connection closed with %d, want 4000", code)
	}
	if na.ID != nb.ID {
		t.Fatalf("same key and name, two node ids: %s at A, %s at B", na.ID, nb.ID)
	}
	for _, inst := range []*Instance{a, b} {
		inst.WaitNodes(3*time.Second, "the node once, at B", func(ns []NodeView) bool {
			return len(ns) == 1 && ns[0].NodeID == nb.ID && ns[0].Instance == bID
		})
		if st := inst.Status(); st.OnlineNodes != 1 {
			t.Fatalf("instance %s counts %d online nodes, want 1", inst.Name, st.OnlineNodes)
		}
	}
	// The survivor is the one that gets the work, wherever it is asked for.
	replied := requestAsync(t, a, key, "echo", "to the survivor")
	task := nextTask(t, nb)
	nb.Result(task.TaskID(), "completed", "from B's connection")
	if r := waitFor(t, replied, 5*time.Second, "the request through A"); r.err != nil || r.Code != http.StatusOK ||
		!strings.Contains(string(r.Body), "from B's connection") {
		t.Fatalf("request through A: %v", r)
	}
	select {
	case <-nb.Closed:
		t.Fatal("B's connection, the newest, was closed")
	default:
	}
}

// Invariant 1 under a race: two connections of one node identity register
// at the same moment at A and at B. The claim is a compare-and-set, so one
// wins; the other must be closed with 4000 within a second, exactly one
// connection survives, and both instances list the node at the winner.
// Several rounds, to give the race its chances. Default heartbeat, as above.
func TestSimultaneousRegistrationsAcrossInstances(t *testing.T) {
	OnEachRedis(t, testSimultaneousRegistrationsAcrossInstances)
}

func testSimultaneousRegistrationsAcrossInstances(t *testing.T, cfg Config) {
	c := New(t, cfg)
	key := c.Account("alice")
	a := c.Start("A", "--max-nodes-per-account", "50")
	b := c.Start("B", "--max-nodes-per-account", "50")
	aID, bID := a.ID(), b.ID()

	type survivor struct {
		n    *nodetest.Node
		inst string
	}
	var survivors []survivor
	for round := range 30 {
		reg := nodetest.Reg(key, fmt.Sprintf("race-%d", round), "echo")
		conns := [2]*nodetest.Node{}
		for j, inst := range []*Instance{a, b} {
			conn, _, err := nodetest.Dial(t, inst.WS())
			if err != nil {
				t.Fatal(err)
			}
			conns[j] = nodetest.Wrap(t, conn)
		}
		var wg sync.WaitGroup
		var errs [2]error
		start := make(chan struct{})
		for j, n := range conns {
			wg.Go(func() {
				<-start
				errs[j] = n.Send("node_register", reg)
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatal(err)
		}
		// Each connection hears node_registered first (both claims win in
		// turn), or is closed at once; then the older one must go.
		for j, n := range conns {
			select {
			case m := <-n.Msgs:
				if m.MsgType != "node_registered" {
					t.Fatalf("round %d: connection %d's first message is %s %v", round, j, m.MsgType, m.Payload)
				}
			case <-n.Closed:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: connection %d heard nothing within 5s", round, j)
			}
		}
		registered := time.Now()
		var loser, winner int
		select {
		case <-conns[0].Closed:
			loser, winner = 0, 1
		case <-conns[1].Closed:
			loser, winner = 1, 0
		case <-time.After(time.Second):
			t.Fatalf("round %d: both connections of one identity (at A and at B) still open 1s after they registered", round)
		}
		if code := conns[loser].WaitClosed(time.Second); code != websocket.StatusCode(4000) {
			t.Fatalf("round %d: the losing connection (at %s) closed with %d, want 4000", round, []string{"A", "B"}[loser], code)
		}
		t.Logf("round %d: the connection at %s won; the other closed %s after registering", round,
			[]string{"A", "B"}[winner], time.Since(registered).Round(time.Millisecond))
		survivors = append(survivors, survivor{conns[winner], []string{aID, bID}[winner]})
	}
	time.Sleep(500 * time.Millisecond) // a late, wrong 4000 would show in this window
	for round, s := range survivors {
		select {
		case <-s.n.Closed:
			t.Fatalf("round %d: the winning connection was closed too (%d)", round, s.n.WaitClosed(time.Second))
		default:
		}
	}
	// Both instances agree on where each node lives: with the winner.
	for _, inst := range []*Instance{a, b} {
		inst.WaitNodes(3*time.Second, "every race's winner", func(ns []NodeView) bool {
			if len(ns) != len(survivors) {
				return false
			}
			at := map[string]string{}
			for _, v := range ns {
				at[v.Name] = v.Instance
			}
			for round, s := range survivors {
				if at[fmt.Sprintf("race-%d", round)] != s.inst {
					return false
				}
			}
			return true
		})
	}
}
