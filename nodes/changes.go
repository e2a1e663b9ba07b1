package nodes

import "sync"

// Changes is the set of this instance's nodes whose directory entry may
// differ from what the cluster directory last wrote: the Hub marks a node
// when it arrives or leaves, takes or gives back a slot, reports its CPU in
// a heartbeat, or gets a benchmark profile. The directory takes the set
// when it flushes, so it looks at the nodes that changed and never at the
// idle ones (invariant 12: idle costs nothing per node).
//
// Like a Signal, it is made before the Hub and the directory and given to
// both at construction. Mark never blocks. A nil *Changes marks nothing.
type Changes struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	full bool // everything may have changed: compare every node
	sig  Signal
}

// NewChanges returns an empty set.
func NewChanges() *Changes { return &Changes{ids: map[string]struct{}{}, sig: NewSignal()} }

// Mark notes that nodeID's entry may have changed, and wakes the reader.
func (c *Changes) Mark(nodeID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.ids[nodeID] = struct{}{}
	c.mu.Unlock()
	c.sig.Notify()
}

// MarkAll asks for every node to be compared (Redis came back, say).
func (c *Changes) MarkAll() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.full = true
	c.mu.Unlock()
	c.sig.Notify()
}

// C fires after a Mark; the set may hold more than one mark by then.
func (c *Changes) C() <-chan struct{} { return c.sig }

// take empties the set and returns what it held.
func (c *Changes) take() (ids map[string]struct{}, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ids) == 0 && !c.full {
		return nil, false
	}
	ids, full = c.ids, c.full
	c.ids, c.full = make(map[string]struct{}, len(ids)), false
	return ids, full
}

// restore puts back what a failed flush took, so it is written next time.
func (c *Changes) restore(ids map[string]struct{}, full bool) {
	c.mu.Lock()
	for id := range ids {
		c.ids[id] = struct{}{}
	}
	c.full = c.full || full
	c.mu.Unlock()
}
