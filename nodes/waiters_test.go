package nodes

import (
	"testing"
)

// woken reports whether w has a wake waiting, taking it.
func woken(w *Waiter) bool {
	select {
	case <-w.C:
		return true
	default:
		return false
	}
}

// A freed slot wakes the oldest waiter of the node's capability, one per
// slot, never the others.
func TestWaitersWakeInOrderOnePerSlot(t *testing.T) {
	ws := NewWaiters()
	a, b, c := ws.Wait("chat"), ws.Wait("chat"), ws.Wait("chat")
	other := ws.Wait("embed")
	if ws.Len() != 4 {
		t.Fatalf("Len = %d, want 4", ws.Len())
	}
	ws.Wake([]string{"chat"}, 1)
	if !woken(a) || woken(b) || woken(c) || woken(other) {
		t.Fatal("one chat slot did not wake exactly the oldest chat waiter")
	}
	ws.Wake([]string{"chat", "embed"}, 2)
	if !woken(b) || !woken(c) || !woken(other) {
		t.Fatal("two slots of a chat+embed node did not wake the other two chat waiters and the embed one")
	}
	if ws.Len() != 0 {
		t.Fatalf("Len = %d after every waiter was woken, want 0", ws.Len())
	}
	ws.Wake([]string{"chat"}, 5) // nobody waits: nothing happens
}

// A woken waiter that found nothing goes back to the front, ahead of those
// that came after it, and is the one to recheck on a timer.
func TestWaitersAgainKeepsThePlace(t *testing.T) {
	ws := NewWaiters()
	a, b := ws.Wait("chat"), ws.Wait("chat")
	if !a.Again() {
		t.Fatal("the oldest waiter, still queued, is not first")
	}
	if b.Again() {
		t.Fatal("the second waiter says it is first")
	}
	ws.Wake([]string{"chat"}, 1)
	if !woken(a) {
		t.Fatal("a was not woken")
	}
	// a found no slot: a request that was not waiting took it.
	if !a.Again() {
		t.Fatal("a woken waiter that found nothing is not back at the front")
	}
	ws.Wake([]string{"chat"}, 1)
	if !woken(a) || woken(b) {
		t.Fatal("the next slot did not go to a, back at the front")
	}
}

// A waiter that leaves after its wake without using it (it gave up)
// passes the wake on; one that took its slot nudges the new first waiter,
// which keeps its place; one that leaves while queued nudges the new first
// if it was first, and takes nothing with it.
func TestWaitersDonePassesTheWakeOn(t *testing.T) {
	ws := NewWaiters()
	a, b, c, d := ws.Wait("chat"), ws.Wait("chat"), ws.Wait("chat"), ws.Wait("chat")
	b.Done(false) // gives up while queued, not first: nobody is nudged
	if ws.Len() != 3 || woken(c) {
		t.Fatalf("Len = %d after a queued waiter left (want 3), or the one behind it was signalled", ws.Len())
	}
	ws.Wake([]string{"chat"}, 1)
	if !woken(a) {
		t.Fatal("a was not woken")
	}
	a.Done(true) // took its slot
	if !woken(c) || ws.Len() != 2 {
		t.Fatalf("after a took its slot, c (now first) was not nudged, or it left the queue (Len %d, want 2)", ws.Len())
	}
	// c looked, found nothing, and keeps its place ahead of d.
	if !c.Again() {
		t.Fatal("the nudged waiter is not first")
	}
	ws.Wake([]string{"chat"}, 1)
	if !woken(c) || woken(d) {
		t.Fatal("the next slot did not go to c, first in line")
	}
	c.Done(false) // gives up with the wake unused: the slot is d's
	if !woken(d) {
		t.Fatal("c gave up its wake and d, next in line, did not get it")
	}
	d.Done(true)
	if ws.Len() != 0 || len(ws.q) != 0 {
		t.Fatalf("Len = %d, queues %v; want none", ws.Len(), ws.q)
	}
}

// A wake that came as the waiter's timer fired (it looked again anyway,
// and found nothing) does not linger to wake it for nothing later.
func TestWaitersAgainDropsAStaleWake(t *testing.T) {
	ws := NewWaiters()
	a := ws.Wait("chat")
	ws.Wake([]string{"chat"}, 1)
	a.Again()
	if woken(a) {
		t.Fatal("a wake consumed before Again is still pending after it")
	}
}
