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
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name        string
		horizon     time.Time // the turn last promised
		hold        time.Duration
		slots       int
		jitter      float64
		wait        time.Duration
		horizonNext time.Time
	}{
		{"an empty queue: the floor plus one turn", time.Time{}, 64 * time.Millisecond, 64, 0.5,
			ms(101), now.Add(ms(101))},
		{"a horizon in the past counts as empty", now.Add(-time.Hour), 64 * time.Millisecond, 64, 0.5,
			ms(101), now.Add(ms(101))},
		{"behind a queue: one turn after the last promised", now.Add(5 * time.Second), 64 * time.Millisecond, 64, 0.5,
			ms(5001), now.Add(ms(5001))},
		{"turns come as fast as slots free: slow registrations, few slots", now.Add(5 * time.Second), 2 * time.Second, 4, 0.5,
			ms(5500), now.Add(ms(5500))},
		{"jitter low: 10 % early", now.Add(5 * time.Second), 64 * time.Millisecond, 64, 0,
			ms(4500.9), now.Add(ms(5001))},
		{"jitter high: up to 10 % late", now.Add(5 * time.Second), 64 * time.Millisecond, 64, 0.999,
			ms(5001 * (0.9 + 0.2*0.999)), now.Add(ms(5001))},
		{"the floor holds after jitter", time.Time{}, time.Millisecond, 64, 0,
			minRetryAfter, now.Add(minRetryAfter + time.Millisecond/64)},
		{"a zero slot count is one slot", now.Add(time.Second), 10 * time.Millisecond, 0, 0.5,
			ms(1010), now.Add(ms(1010))},
		{"past the ceiling: half to all of it, the queue not extended", now.Add(40 * time.Second), 64 * time.Millisecond, 64, 0,
			maxRetryAfter / 2, now.Add(40 * time.Second)},
		{"past the ceiling, jitter high", now.Add(40 * time.Second), 64 * time.Millisecond, 64, 0.5,
			maxRetryAfter * 3 / 4, now.Add(40 * time.Second)},
		{"jitter cannot push past the ceiling", now.Add(29 * time.Second), 64 * time.Millisecond, 64, 0.999,
			maxRetryAfter, now.Add(ms(29001))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait, next := retryAfter(now, tc.horizon, tc.hold, tc.slots, tc.jitter)
			if d := wait - tc.wait; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("wait %v, want %v", wait, tc.wait)
			}
			if !next.Equal(tc.horizonNext) {
				t.Errorf("horizon %v after now, want %v", next.Sub(now), tc.horizonNext.Sub(now))
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
