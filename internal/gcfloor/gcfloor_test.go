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

// garbageOf allocates n bytes in 4 KiB pieces, keeping none, and returns
// the collections that ran meanwhile.
func garbageOf(n int) uint64 {
	before := read("/gc/cycles/total:gc-cycles")
	for range n >> 12 {
		sink = make([]byte, 4<<10)
	}
	return read("/gc/cycles/total:gc-cycles") - before
}

// With a floor far above the live heap, garbage under the floor is
// collected at most once; without it (GOGC's 100 on a heap of a few MiB)
// the same garbage takes several collections. Then stop gives GOGC back.
func TestFloorDefersCollections(t *testing.T) {
	const floor = 64 << 20
	// Without a floor, the heap's goal (GOGC's 100 on a heap of a few MiB)
	// is a third of the garbage or less: it takes three collections or
	// more. The goal is judged, not a count: a count depends on the
	// collector's pace, and on a busy machine the runtime lets the heap
	// overshoot its goal (the GC CPU limiter turns assists off), so the
	// same garbage took two.
	runtime.GC()
	if goal := read("/gc/heap/goal:bytes"); goal*3 > 48<<20 {
		t.Fatalf("without a floor the heap's goal is %d MiB: the test cannot tell a floor from none with 48 MiB of garbage", goal>>20)
	}

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
	if with := garbageOf(48 << 20); with > 1 {
		t.Errorf("with a %d MiB floor, 48 MiB of garbage took %d collections, want at most 1", floor>>20, with)
	}
	// A floor, not a ceiling gone: garbage of several floors is collected
	// about once a floor (a percent too high for the runtime's heap
	// minimum once put a nearly empty heap's goal at 400 MiB).
	// (Judged by the goal, for the reason above.)
	garbageOf(4 * floor)
	if goal := read("/gc/heap/goal:bytes"); goal > floor*5/4 {
		t.Errorf("with a %d MiB floor, the heap's goal is %d MiB after %d MiB of garbage, want about the floor", floor>>20, goal>>20, 4*floor>>20)
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

// With collection off (GOGC=off, here debug.SetGCPercent(-1)) there is
// nothing to put a floor under.
func TestOffWhenCollectionIsOff(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	if stop, ok := Start(64 << 20); ok {
		stop()
		t.Error("a floor started with collection off")
	}
}
