// Package boundtest feeds a decoder the worst JSON a stranger can send and
// measures what reading it costs: the bytes it allocates and the stack it
// grows, per byte of input (invariant 16: every decoder is bounded in
// depth and allocates at most a small multiple of its input).
package boundtest

import (
	"runtime"
	"strings"
	"testing"
)

// MaxAllocPerByte is the small multiple: a decoder may allocate at most
// this many bytes per byte of its input (plus Slack), whatever the input.
const MaxAllocPerByte = 8

// Slack is what any decode may allocate beyond MaxAllocPerByte per byte:
// the fixed cost of a call (a struct, an error's text, a map's first
// buckets).
const Slack = 64 << 10

// MaxStackGrowth is how far reading one input may grow its goroutine's
// stack. A decoder that recurses once per level grew it to 512 MiB for a
// 2 MB body of '['.
const MaxStackGrowth = 1 << 20

// Shape is one hostile JSON value.
type Shape struct {
	Name string
	JSON string
}

// Shapes are hostile values of about n bytes each: nested as deep as the
// bytes allow (balanced and not), as wide as they allow (many tiny
// elements or members: the most decoded values per input byte), and long
// (one huge string, one huge number).
func Shapes(n int) []Shape {
	half := n / 2
	return []Shape{
		{"deep arrays", strings.Repeat("[", half) + strings.Repeat("]", half)},
		{"deep unclosed", strings.Repeat("[", n)},
		{"deep objects", strings.Repeat(`{"a":`, n/5) + "1" + strings.Repeat("}", n/5)},
		{"wide empty arrays", "[" + strings.Repeat("[],", n/3) + "[]]"},
		{"wide empty objects", "[" + strings.Repeat("{},", n/3) + "{}]"},
		{"wide numbers", "[" + strings.Repeat("0,", n/2) + "0]"},
		{"wide strings", "[" + strings.Repeat(`"",`, n/3) + `""]`},
		{"wide members", "{" + strings.Repeat(`"":0,`, n/5) + `"":0}`},
		{"wide distinct members", "{" + members(n/12) + "}"},
		{"long string", `"` + strings.Repeat("a", n) + `"`},
		{"long escapes", `"` + strings.Repeat(`\u00e9`, n/6) + `"`},
		{"long number", "1" + strings.Repeat("0", n)},
	}
}

// members is n distinct members "k0":0,"k1":0,… of about 12 bytes each.
func members(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k`)
		b.WriteString(itoa(i))
		b.WriteString(`":0`)
	}
	return b.String()
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var d [20]byte
	p := len(d)
	for ; i > 0; i /= 10 {
		p--
		d[p] = byte('0' + i%10)
	}
	return string(d[p:])
}

// Cost is what reading one input cost.
type Cost struct {
	Alloc uint64 // bytes allocated on the heap
	Stack int64  // growth of the stacks' memory
}

// Measure runs f on a goroutine of its own, which starts with a small
// stack as a connection's does, and returns what it cost. Other
// goroutines' allocations count too, so a test should not run others.
func Measure(f func()) Cost {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
	runtime.ReadMemStats(&after)
	return Cost{Alloc: after.TotalAlloc - before.TotalAlloc, Stack: int64(after.StackSys) - int64(before.StackSys)}
}

// Check measures read on in and fails t when the cost passes the bounds.
func Check(t testing.TB, name string, in []byte, read func([]byte)) Cost {
	t.Helper()
	c := Measure(func() { read(in) })
	if limit := uint64(len(in))*MaxAllocPerByte + Slack; c.Alloc > limit {
		t.Errorf("%s: reading %d bytes allocated %d (%.1f a byte; at most %d a byte)", name, len(in), c.Alloc,
			float64(c.Alloc)/float64(len(in)), MaxAllocPerByte)
	}
	if c.Stack > MaxStackGrowth {
		t.Errorf("%s: reading %d bytes grew the stack by %d bytes", name, len(in), c.Stack)
	}
	return c
}
