package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	const busy = 1 << 40 // allocating far faster than any headroom
	for _, c := range []struct {
		name               string
		floor, live, roots uint64
		base               int
		perSecond          uint64
		want               int
	}{
		{"busy, small heap: the goal is the floor", 64 * mib, 7 * mib, 1 * mib, 100, busy, 712}, // 7 + 8×7.12 = 64
		{"busy, a second's allocation under the floor: that much headroom", 64 * mib, 7 * mib, 1 * mib, 100, 32 * mib, 400},
		{"quiet: GOGC's, the heap does not creep up to the floor", 64 * mib, 7 * mib, 1 * mib, 100, 6 * mib, 100},
		{"idle: GOGC's", 64 * mib, 7 * mib, 1 * mib, 100, 0, 100},
		{"heap above the floor: GOGC's", 64 * mib, 80 * mib, 1 * mib, 100, busy, 100},
		{"goal already past the floor: GOGC's", 64 * mib, 40 * mib, 0, 100, busy, 100}, // 40 + 40 = 80 > 64
		{"a higher GOGC is kept", 64 * mib, 30 * mib, 0, 200, busy, 200},
		{"empty heap: the runtime's 4 MiB minimum × 16 is the floor", 64 * mib, 0, 0, 100, busy, 1600},
		{"tiny heap: no more than the minimum's percent", 64 * mib, 1 * mib, 0, 100, busy, 1600},
		{"small floor: never below base", 2 * mib, 0, 0, 100, busy, 100},
		{"roots count: many goroutine stacks", 64 * mib, 8 * mib, 24 * mib, 100, busy, 175},
	} {
		if got := Percent(c.floor, c.live, c.roots, c.base, c.perSecond); got != c.want {
			t.Errorf("%s: Percent(%d, %d, %d, %d, %d) = %d, want %d", c.name, c.floor, c.live, c.roots, c.base, c.perSecond, got, c.want)
		}
	}
}

func read(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// garbageOf allocates n bytes in 4 KiB pieces, keeping none.
func garbageOf(n int) {
	for range n >> 12 {
		sink = make([]byte, 4<<10)
	}
}

// A floor raises GOGC while the program allocates fast, never lets the
// heap's goal pass the floor (or GOGC's own goal, when that is higher),
// and stop gives GOGC back. How high the percent goes follows the
// allocation rate over wall-clock time, which a busy machine lowers at
// will (a descheduled test allocates slowly), so the goal the floor
// yields for a given rate is judged in TestPercent, not here: counting
// collections here failed under load (48 MiB of garbage took 2).
func TestFloorDefersCollections(t *testing.T) {
	const floor = 64 << 20
	stop, ok := Start(floor)
	if !ok {
		t.Fatal("Start refused")
	}
	defer stop()
	if _, again := Start(floor); again {
		t.Error("a second floor started beside the first")
	}
	// The hook runs after each collection, on the finalizer goroutine; it
	// raises the percent once it has seen this test allocate fast.
	for deadline := time.Now().Add(10 * time.Second); read("/gc/gogc:percent") <= 100; {
		if time.Now().After(deadline) {
			t.Fatal("GOGC still 100 after ten seconds of allocating hundreds of MiB a second: the floor's hook did not run")
		}
		garbageOf(8 << 20)
		runtime.Gosched()
	}
	// A floor, not a ceiling gone: garbage of several floors is collected
	// about once a floor (a percent too high for the runtime's heap
	// minimum once put a nearly empty heap's goal at 400 MiB). Judged by
	// the goal, not a count (see above), once the hook has run after the last
	// collection (until then the goal is what the percent set after the
	// collection before gives the heap this one found), against the floor
	// or GOGC's own goal, whichever is higher: on a busy machine a
	// collection's marking runs long, what is allocated meanwhile counts
	// as live, and a heap found at 42 MiB has GOGC's goal of 84 MiB, which
	// the floor never lowers.
	garbageOf(4 * floor)
	settled(t)
	live, roots := read("/gc/heap/live:bytes"), read("/gc/scan/stack:bytes")+read("/gc/scan/globals:bytes")
	want := max(uint64(floor), live+live+roots)
	if goal := read("/gc/heap/goal:bytes"); goal > want*5/4 {
		t.Errorf("with a %d MiB floor and %d MiB live, the heap's goal is %d MiB after %d MiB of garbage, want about %d MiB",
			floor>>20, live>>20, goal>>20, 4*floor>>20, want>>20)
	}

	stop()
	if got := read("/gc/gogc:percent"); got != 100 {
		t.Errorf("after stop GOGC is %d, want 100 back", got)
	}
	stopAgain, again := Start(floor)
	if !again {
		t.Error("a floor cannot start again after stop")
	}
	stopAgain()
}

// settled waits until the floor's hook has run after the latest
// collection. It runs on the finalizer goroutine once that collection is
// over, so the goal read before it may still be the previous percent's.
// The hook runs when its sentinel is collected; one allocated while a
// collection was marking survives it, and then only the next collection
// runs the hook: when none comes, a forced one does.
func settled(t *testing.T) {
	t.Helper()
	mu.Lock()
	f := current
	mu.Unlock()
	for range 20 {
		cycles := read("/gc/cycles/total:gc-cycles")
		for wait := time.Now().Add(100 * time.Millisecond); f.adjustedAt.Load() < cycles && time.Now().Before(wait); {
			runtime.Gosched()
		}
		if f.adjustedAt.Load() >= cycles {
			return
		}
		runtime.GC()
	}
	t.Fatal("the floor's hook did not run after 20 forced collections")
}

// With collection off (GOGC=off, here debug.SetGCPercent(-1)) there is
// nothing to put a floor under.
func TestOffWhenCollectionIsOff(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	if stop, ok := Start(64 << 20); ok {
		stop()
		t.Error("a floor started with collection off")
	}
}
