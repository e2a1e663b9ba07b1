package nodes

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

func TestRetryAfter(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name   string
		queued float64 // turns promised and not yet come
		hold   time.Duration
		slots  int
		jitter float64
		wait   time.Duration
		next   float64
	}{
		// hold 64 ms over 64 slots: a turn every millisecond.
		{"an empty queue: the floor plus one turn", 0, 64 * time.Millisecond, 64, 0.5, ms(101), 101},
		{"behind a queue: one turn after the last promised", 5000, 64 * time.Millisecond, 64, 0.5, ms(5001), 5001},
		{"turns come as fast as slots free: slow registrations, few slots", 10, 2 * time.Second, 4, 0.5, ms(5500), 11},
		{"jitter low: 10 % early", 5000, 64 * time.Millisecond, 64, 0, ms(4500.9), 5001},
		{"jitter high: up to 10 % late", 5000, 64 * time.Millisecond, 64, 0.999, ms(5001 * (0.9 + 0.2*0.999)), 5001},
		{"the floor holds after jitter", 0, time.Millisecond, 64, 0, minRetryAfter, 6401},
		{"a zero slot count is one slot", 100, 10 * time.Millisecond, 0, 0.5, ms(1010), 101},
		{"a zero hold is a turn a microsecond", 0, 0, 64, 0.5, ms(100.001), 100001},
		{"past the ceiling: half to all of it, the queue not extended", 40000, 64 * time.Millisecond, 64, 0, maxRetryAfter / 2, 40000},
		{"past the ceiling, jitter high", 40000, 64 * time.Millisecond, 64, 0.5, maxRetryAfter * 3 / 4, 40000},
		{"jitter cannot push past the ceiling", 29000, 64 * time.Millisecond, 64, 0.999, maxRetryAfter, 29001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait, next := retryAfter(tc.queued, tc.hold, tc.slots, tc.jitter)
			if d := wait - tc.wait; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("wait %v, want %v", wait, tc.wait)
			}
			if d := next - tc.next; d < -1e-6 || d > 1e-6 {
				t.Errorf("queue %.3f turns, want %.3f", next, tc.next)
			}
			if wait < minRetryAfter || wait > maxRetryAfter {
				t.Errorf("wait %v outside [%v, %v]", wait, minRetryAfter, maxRetryAfter)
			}
		})
	}
}

// A burst shed at one instant is spread over the time the slots need to
// take it: the n-th node is told about n turns, not what the first was.
func TestShedPacerSpreadsABurst(t *testing.T) {
	p := newShedPacer(64)
	p.rand = func() float64 { return 0.5 } // no jitter
	for range 32 {
		p.held(64 * time.Millisecond) // a turn every millisecond
	}
	now := time.Now()
	var waits []time.Duration
	for range 5000 {
		waits = append(waits, p.shed(now))
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] < waits[i-1] {
			t.Fatalf("shed %d told %v, before shed %d's %v", i, waits[i], i-1, waits[i-1])
		}
	}
	// 5,000 turns of about a millisecond after the 100 ms floor.
	if last := waits[len(waits)-1]; last < 4*time.Second || last > 6*time.Second {
		t.Errorf("the 5,000th node shed at once is told %v, want about 5.1 s", last)
	}
	// Once the queue has drained, a node is told the floor again.
	if w := p.shed(now.Add(time.Minute)); w > 2*minRetryAfter {
		t.Errorf("after the queue drained: %v", w)
	}
}

// The queue is counted in turns: half a second later, half a second's
// turns have come; and when registrations speed up, the turns promised
// next come as much sooner.
func TestShedPacerFollowsTheRate(t *testing.T) {
	p := newShedPacer(64)
	p.rand = func() float64 { return 0.5 }
	p.hold = 64 * time.Millisecond // a turn every millisecond
	now := time.Now()
	for range 1900 {
		p.shed(now) // 2,000 turns promised: the floor's 100, then 1,900
	}
	if w := p.shed(now.Add(500 * time.Millisecond)); w < 1450*time.Millisecond || w > 1550*time.Millisecond {
		t.Errorf("500 ms later, behind 1,500 turns of 1 ms: told %v, want about 1.5 s", w)
	}
	p.hold = 16 * time.Millisecond // registrations four times as fast
	if w := p.shed(now.Add(500 * time.Millisecond)); w < 350*time.Millisecond || w > 400*time.Millisecond {
		t.Errorf("behind 1,500 turns of 0.25 ms: told %v, want about 375 ms", w)
	}
}

func TestMaxRegisteringDefault(t *testing.T) {
	for _, tc := range []struct{ procs, want int }{
		{1, 32}, {2, 64}, {4, 128}, {16, 512}, {32, 1024}, {256, 1024}, {0, 32},
	} {
		if got := defaultMaxRegistering(tc.procs); got != tc.want {
			t.Errorf("defaultMaxRegistering(%d) = %d, want %d", tc.procs, got, tc.want)
		}
	}
	if got, want := (Config{}).withDefaults().MaxRegistering, defaultMaxRegistering(runtime.GOMAXPROCS(0)); got != want {
		t.Errorf("the default MaxRegistering is %d with GOMAXPROCS %d, want %d", got, runtime.GOMAXPROCS(0), want)
	}
	if got := (Config{MaxRegistering: 7}).withDefaults().MaxRegistering; got != 7 {
		t.Errorf("an explicit MaxRegistering 7 became %d", got)
	}
}

// A registration shed at the door (MaxRegistering) is told in its close
// reason when to come back: a 1013 whose reason reads retry_after_ms=N,
// N within the pacer's bounds, and no error message before it (GemmaNet's
// SDK would stop for good on one).
func TestShedCloseCarriesRetryAfter(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := serveHub(t, Config{PingInterval: time.Hour, MaxRegistering: 1,
		BeforeAttach: func(_ context.Context, _, _, name string) {
			if name == "slow" {
				entered <- struct{}{}
				<-release
			}
		}})
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	dial := func(name string) *websocket.Conn {
		t.Helper()
		c, _, err := websocket.Dial(ctx, strings.Replace(h.url, "http", "ws", 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseNow() })
		if err := c.Write(ctx, websocket.MessageText, wire.MustEncode(wire.MsgNodeRegister, wire.RegisterPayload{
			APIKey: "k", Name: name, Capabilities: []string{"echo"}})); err != nil {
			t.Fatal(err)
		}
		return c
	}
	dial("slow")
	<-entered // it holds the one slot

	var waits []time.Duration
	for _, name := range []string{"shed-1", "shed-2"} {
		typ, data, err := dial(name).Read(ctx)
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("%s: got a message (%v) %s, err %v; want close 1013", name, typ, data, err)
		}
		if ce.Code != wire.CloseTryAgainLater {
			t.Fatalf("%s: closed with %d %q, want 1013", name, ce.Code, ce.Reason)
		}
		wait, ok := wire.ParseRetryAfter(ce.Reason)
		if !ok || wait < minRetryAfter || wait > maxRetryAfter {
			t.Fatalf("%s: close reason %q, want retry_after_ms=N with N in [%v, %v]", name, ce.Reason, minRetryAfter, maxRetryAfter)
		}
		waits = append(waits, wait)
	}
	// The second shed is behind the first in the pacer's queue (jitter is
	// ±10 % of about 100 ms, a turn 20 ms: it may be earlier, by little).
	if waits[1] < waits[0]-30*time.Millisecond {
		t.Errorf("the second shed node was told %v, the first %v", waits[1], waits[0])
	}
}
