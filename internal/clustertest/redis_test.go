package clustertest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/sdk"
)

// shot is one request of a traffic run.
type shot struct {
	typ  string
	sent time.Time
	took time.Duration
	code int    // 0 on a transport error
	ec   string // error.code
	err  error
}

func (s shot) String() string {
	if s.err != nil {
		return fmt.Sprintf("%s sent at %s: error after %s: %v", s.typ, s.sent.Format("15:04:05.000"), s.took.Round(time.Millisecond), s.err)
	}
	return fmt.Sprintf("%s sent at %s: HTTP %d %s after %s", s.typ, s.sent.Format("15:04:05.000"), s.code, s.ec, s.took.Round(time.Millisecond))
}

// traffic sends requests to one instance at a steady rate, cycling through
// task types, until Stop.
type traffic struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	sent []shot
	once sync.Once
}

func startTraffic(t *testing.T, i *Instance, key string, every time.Duration, types ...string) *traffic {
	tr := &traffic{stop: make(chan struct{})}
	tr.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
			}
			typ := types[n%len(types)]
			tr.wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				s := shot{typ: typ, sent: time.Now()}
				r, err := i.Request(ctx, key, typ, "tick")
				s.took, s.err = time.Since(s.sent), err
				if err == nil {
					s.code, s.ec = r.Code, r.ErrorCode()
				}
				tr.mu.Lock()
				tr.sent = append(tr.sent, s)
				tr.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() { tr.Stop() })
	return tr
}

// Stop ends the traffic, waits for every request and returns them all.
func (tr *traffic) Stop() []shot {
	tr.once.Do(func() { close(tr.stop) })
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]shot(nil), tr.sent...)
}

// redisPair is A and B on a private Redis, with a node serving type "a" on A
// and a node serving type "b" on B.
type redisPair struct {
	t     *testing.T
	c     *Cluster
	srv   *redistest.Server // newRedisPair's private Redis
	a, b  *Instance
	key   string
	start time.Time
}

// taskTimeout is the pair's --task-timeout: no request may take longer
// than it plus a second.
const taskTimeout = 3 * time.Second

func newRedisPair(t *testing.T) *redisPair {
	srv := redistest.Start(t)
	p := newPair(t, Config{RedisURL: srv.URL()})
	p.srv = srv
	return p
}

// newPair is A and B as in newRedisPair, on the Redis cfg names.
func newPair(t *testing.T, cfg Config) *redisPair {
	c := New(t, cfg)
	key := c.Account("alice")
	flags := []string{"--heartbeat-interval", "500ms", "--liveness-ttl", "2s", "--watch-interval", "100ms",
		"--task-timeout", taskTimeout.String(), "--queue-timeout", "1s"}
	a := c.Start("A", flags...)
	b := c.Start("B", flags...)
	work := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if r, ok := probe(task); ok {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return sdk.Result{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
			return sdk.Result{Text: "done " + task.Type}, nil
		}
	})
	RunNode(t, sdk.NodeConfig{URL: a.WS(), APIKey: key, Name: "na", Capabilities: []string{"a"}, MaxConcurrency: 32, Handler: work}).
		WaitRegistered(t, 5*time.Second)
	RunNode(t, sdk.NodeConfig{URL: b.WS(), APIKey: key, Name: "nb", Capabilities: []string{"b"}, MaxConcurrency: 32, Handler: work}).
		WaitRegistered(t, 5*time.Second)
	b.WaitNodes(3*time.Second, "both nodes", func(ns []NodeView) bool { return len(ns) == 2 })
	return &redisPair{t: t, c: c, a: a, b: b, key: key, start: time.Now()}
}

// request sends one request of typ to B and returns its status, code and time.
func (p *redisPair) request(typ string) (int, string, time.Duration) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	r, err := p.b.Request(ctx, p.key, typ, "probe")
	if err != nil {
		p.t.Fatalf("request of type %s to B: %v", typ, err)
	}
	return r.Code, r.ErrorCode(), time.Since(start)
}

// recovered waits (up to 5 s) until both types succeed through B again.
func (p *redisPair) recovered(since time.Time, what string) {
	p.t.Helper()
	Eventually(p.t, 5*time.Second, 50*time.Millisecond, func() (bool, string) {
		ca, ea, _ := p.request("a")
		cb, eb, _ := p.request("b")
		return ca == http.StatusOK && cb == http.StatusOK,
			fmt.Sprintf("after %s: type a (node on A) %d %s, type b (node on B) %d %s", what, ca, ea, cb, eb)
	})
	p.t.Logf("both types served through B %s after %s", time.Since(since).Round(time.Millisecond), what)
}

// outage stops Redis, checks what B does without it, and starts Redis
// again (empty). It returns when B noticed, and when Redis came back.
func (p *redisPair) outage() (down, back time.Time) {
	t := p.t
	t.Helper()
	stopped := time.Now()
	p.srv.Stop()
	var h Health
	Eventually(t, 3*time.Second, 50*time.Millisecond, func() (bool, string) {
		code, hh, err := p.b.Health(t.Context())
		h = hh
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(hh.Reason, "Redis"),
			fmt.Sprintf("B's health with Redis down: %d %+v %v; want 503 with a reason naming Redis", code, hh, err)
	})
	down = time.Now()
	t.Logf("B not ready %s after Redis stopped: %q", down.Sub(stopped).Round(time.Millisecond), h.Reason)
	if st := p.b.Status(); st.Ready || !strings.Contains(st.NotReadyReason, "Redis") {
		t.Errorf("B's status with Redis down: %+v; want ready false and a reason naming Redis", st)
	}
	if code, ec, took := p.request("b"); code != http.StatusOK {
		t.Errorf("type b (node on B) with Redis down: HTTP %d %s after %s, want 200", code, ec, took)
	}
	if code, ec, took := p.request("a"); code != http.StatusServiceUnavailable || took > 1500*time.Millisecond {
		t.Errorf("type a (node on A) with Redis down: HTTP %d %s after %s, want 503 within 1.5s", code, ec, took)
	} else {
		t.Logf("type a with Redis down: 503 %s after %s", ec, took.Round(time.Millisecond))
	}
	time.Sleep(time.Second) // traffic while Redis is down
	back = time.Now()
	p.srv.Restart()
	return down, back
}

// checkShots checks every request of a traffic run: none hung or failed in
// transport and, if strict, each ended 200, 502 or 503; those that ran
// while B knew Redis was down were served if B's own node could, and
// failed fast with 503 if not.
func checkShots(t *testing.T, shots []shot, strict bool, down, back time.Time) {
	t.Helper()
	counts := map[string]int{}
	for _, s := range shots {
		counts[fmt.Sprintf("%s %d %s", s.typ, s.code, s.ec)]++
		switch {
		case s.err != nil:
			t.Errorf("request %v: a transport error", s)
		case s.took > taskTimeout+time.Second:
			t.Errorf("request %v: longer than the task timeout (%s) plus 1s", s, taskTimeout)
		case s.code != http.StatusOK && s.code != http.StatusBadGateway && s.code != http.StatusServiceUnavailable:
			if strict {
				t.Errorf("request %v: want 200, 502 or 503", s)
			} else {
				t.Logf("request %v (not 200, 502 or 503: a known bug)", s)
			}
		}
		if s.sent.After(down) && s.sent.Add(s.took).Before(back) {
			switch {
			case s.typ == "b" && s.code != http.StatusOK:
				t.Errorf("request %v, with Redis down: want 200 (its node is on B)", s)
			case s.typ == "a" && (s.code != http.StatusServiceUnavailable || s.took > 1500*time.Millisecond):
				t.Errorf("request %v, with Redis down: want 503 within 1.5s", s)
			}
		}
	}
	t.Logf("%d requests: %v", len(shots), counts)
	if len(shots) < 50 {
		t.Errorf("only %d requests were sent", len(shots))
	}
}

// Invariant 10: Redis restarts (empty), and later stays down for a while,
// under a steady stream of requests at B (20/s) for a type whose node is on
// A and a type whose node is on B. Nothing hangs; every request ends with
// 200, 502 or 503; while Redis is down B says so in its readiness, serves
// what its own node can and fails the rest fast with 503; when Redis is
// back, both types work again through B within seconds, nothing restarted.
func TestRedisRestartDuringTraffic(t *testing.T) {
	p := newRedisPair(t)
	tr := startTraffic(t, p.b, p.key, 50*time.Millisecond, "a", "b")
	time.Sleep(1500 * time.Millisecond) // steady traffic first

	restarted := time.Now()
	p.srv.Restart()
	p.recovered(restarted, "the Redis restart")
	time.Sleep(time.Second)

	down, back := p.outage()
	p.recovered(back, "Redis came back")
	time.Sleep(500 * time.Millisecond)
	checkShots(t, tr.Stop(), true, down, back)
}

// Invariant 10, the outage: Redis stops under a steady stream of requests
// at B. B's readiness and status say Redis is unreachable; what B's own
// node can run is still served, what needs A's node fails fast with 503;
// nothing hangs or fails in transport, before, during or after.
func TestRedisOutageServesLocalNodesOnly(t *testing.T) {
	p := newRedisPair(t)
	tr := startTraffic(t, p.b, p.key, 50*time.Millisecond, "a", "b")
	time.Sleep(time.Second) // steady traffic first
	down, back := p.outage()
	time.Sleep(time.Second) // and after
	// Not strict about codes: a task in flight when Redis stops ends 504
	// (TestRedisOutageFailsRemoteTasksInFlight's bug), and the wrong 404s
	// after Redis returns are the bugs of the two tests below.
	checkShots(t, tr.Stop(), false, down, back)
}

// Invariant 10, the return: after an outage, Redis comes back empty, and
// both task types work through B again within 5 s without restarting
// anything: the bus resubscribes, the instances re-register, the claims
// and directories are re-asserted.
func TestRedisReturnsWithoutRestarts(t *testing.T) {
	p := newRedisPair(t)
	tr := startTraffic(t, p.b, p.key, 50*time.Millisecond, "a", "b")
	time.Sleep(time.Second)
	_, back := p.outage()
	p.recovered(back, "Redis came back")
	tr.Stop()
}

// Invariant 10, for a task already on its way: a request at B whose node is
// on A is running when Redis goes down. Its result has no way back to B, so
// B must fail it fast (502 or 503, within a couple of seconds: B notices
// the outage within 2 s), not leave the client waiting for the task
// timeout (here 10 s, by default 60 s).
func TestRedisOutageFailsRemoteTasksInFlight(t *testing.T) {
	srv := redistest.Start(t)
	c := New(t, Config{RedisURL: srv.URL()})
	key := c.Account("alice")
	flags := []string{"--heartbeat-interval", "500ms", "--liveness-ttl", "2s", "--watch-interval", "100ms", "--task-timeout", "10s"}
	a := c.Start("A", flags...)
	b := c.Start("B", flags...)
	started, release := make(chan struct{}, 1), make(chan struct{})
	handler := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if r, ok := probe(task); ok {
			return r, nil
		}
		signal(started, struct{}{})
		select {
		case <-ctx.Done():
			return sdk.Result{}, ctx.Err()
		case <-release:
			return sdk.Result{Text: "finished"}, nil
		}
	})
	RunNode(t, sdk.NodeConfig{URL: a.WS(), APIKey: key, Name: "na", Capabilities: []string{"a"}, Handler: handler}).
		WaitRegistered(t, 5*time.Second)
	b.WaitNodes(3*time.Second, "the node", func(ns []NodeView) bool { return len(ns) == 1 })

	replied := async(t, func(ctx context.Context) reply {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second) // past the task timeout
		defer cancel()
		r, err := b.Request(ctx, key, "a", "x")
		return reply{r, err, time.Now()}
	})
	waitFor(t, started, 5*time.Second, "the handler")
	stopped := time.Now()
	srv.Stop()
	close(release) // the node answers; the answer cannot reach B
	r := waitFor(t, replied, 15*time.Second, "the request")
	took := r.at.Sub(stopped)
	if r.err != nil || (r.Code != http.StatusBadGateway && r.Code != http.StatusServiceUnavailable) || took > 2500*time.Millisecond {
		t.Fatalf("request in flight on A's node when Redis stopped: %v, %s after the outage; want 502 or 503 within 2.5s",
			r, took.Round(time.Millisecond))
	}
	t.Logf("request in flight when Redis stopped: HTTP %d %s, %s after the outage", r.Code, r.ErrorCode(), took.Round(time.Millisecond))
}
