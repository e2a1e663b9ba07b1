// Package gcfloor keeps Go's collector from running many times a second
// on a small heap.
//
// With GOGC's default (100) a collection starts once the heap has grown by
// as much as it held live after the last one. A coordinator's live heap is
// small (about 7 MiB with 20 nodes) while it allocates tens of MiB a second
// under load (about 16 KiB a request), so at 5,000 requests/s it collected
// 22 times a second, and each collection took one of a 2-core machine's
// two Ps for its mark phase: half of the p99 at that rate (BENCHMARKS.md,
// "a floor under the heap").
//
// After every collection a goroutine-free hook (a finalizer that re-arms
// itself) reads the live heap, stacks, globals and the bytes allocated
// since the last collection from runtime/metrics. When the process
// allocates faster than GOGC's headroom a second (so it would collect
// more than once a second), it sets the GC percent that gives the heap a
// second's allocation of headroom, up to the floor; otherwise GOGC's. So
// a quiet or lightly loaded process is collected exactly as GOGC says
// (its memory does not creep up to the floor), a busy one about once a
// second, and a heap above the floor as GOGC says. Its work is one
// runtime/metrics read per collection.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// runtimeHeapMinimum is the runtime's smallest heap goal at GOGC=100
// (defaultHeapMinimum, 4 MiB); it scales with the percent, so a percent
// above floor/4 MiB×100 would raise the goal of a small heap past the floor.
const runtimeHeapMinimum = 4 << 20

var (
	mu      sync.Mutex
	current *floor
)

type floor struct {
	bytes   uint64
	base    int // GOGC's percent: the floor never lowers it
	stopped atomic.Bool
	last    int
	samples []metrics.Sample

	prevAt     time.Time // the last adjust, and the bytes allocated by then
	prevAllocs uint64

	// adjustedAt is the count of collections the last adjust had seen:
	// until the hook has run after a collection, the heap's goal is the
	// one the percent of the one before gave (tests wait for it).
	adjustedAt atomic.Uint64
}

// Start lets a busy process's heap grow by up to bytes before a
// collection (see the package comment) for as long as the process runs or
// until stop is called, which gives GOGC back. The collector is the process's:
// only one floor runs at a time, and Start reports false (with a stop that
// does nothing) when one already does, when bytes is 0, or when
// collection is off (GOGC=off, or debug.SetGCPercent(-1)).
func Start(bytes uint64) (stop func(), started bool) {
	// GOGC as the runtime holds it (its environment variable, or a
	// debug.SetGCPercent before this); -1 is off.
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(gogc)
	base := int(int64(value(gogc[0])))
	if bytes == 0 || base < 0 {
		return func() {}, false
	}
	f := &floor{bytes: bytes, base: base, last: base, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
		{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"},
	}}
	mu.Lock()
	if current != nil {
		mu.Unlock()
		return func() {}, false
	}
	current = f
	mu.Unlock()
	f.adjust()
	f.arm()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if current == f && !f.stopped.Swap(true) {
			current = nil
			debug.SetGCPercent(f.base)
		}
	}, true
}

// sentinel is what the finalizer hangs on: big enough not to share a tiny
// allocation block, whose finalizer would wait for its neighbours.
type sentinel struct{ _ [32]byte }

// arm makes the next collection call adjust, and arm again.
func (f *floor) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if f.stopped.Load() {
			return
		}
		f.adjust()
		f.arm()
	})
}

// adjust measures the allocation rate since the last collection and sets
// the percent Percent gives for it; the runtime's goal is
// live + (live+stacks+globals)×p/100 (since Go 1.18).
func (f *floor) adjust() {
	metrics.Read(f.samples)
	live, stacks, globals, allocs := value(f.samples[0]), value(f.samples[1]), value(f.samples[2]), value(f.samples[3])
	defer f.adjustedAt.Store(value(f.samples[4]))
	now := time.Now()
	var perSecond uint64
	if !f.prevAt.IsZero() {
		if dt := now.Sub(f.prevAt); dt > 0 {
			perSecond = uint64(float64(allocs-f.prevAllocs) / dt.Seconds())
		}
	}
	f.prevAt, f.prevAllocs = now, allocs
	p := Percent(f.bytes, live, stacks+globals, f.base, perSecond)
	// Setting the percent takes the heap lock: skip changes under 5 %.
	if d := p - f.last; d != 0 && (d*20 > f.last || -d*20 > f.last || p == f.base) {
		mu.Lock()
		if !f.stopped.Load() {
			debug.SetGCPercent(p)
			f.last = p
		}
		mu.Unlock()
	}
}

// Percent is the GC percent for the next cycle: base (GOGC's) when the
// process allocates no more a second than base leaves it headroom
// (live+roots)×base/100, where roots are the stacks and globals the
// runtime also scans; otherwise the percent whose headroom is a second's
// allocation, up to the floor. It is at most floor/4 MiB×100: the
// runtime's heap minimum (4 MiB at 100) grows with the percent, and would
// otherwise put a nearly empty heap's goal far above the floor (at
// 10,000 %, 400 MiB).
func Percent(floor, live, roots uint64, base int, allocPerSecond uint64) int {
	scannable := max(live+roots, 1)
	if live >= floor || allocPerSecond <= scannable*uint64(base)/100 {
		return base
	}
	room := min(allocPerSecond, floor-live)
	p := room * 100 / scannable
	p = min(p, floor*100/runtimeHeapMinimum)
	return int(max(p, uint64(base)))
}

func value(s metrics.Sample) uint64 {
	if s.Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s.Value.Uint64()
}
