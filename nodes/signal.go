package nodes

// Signal is a wake-up between goroutines that coalesces: Notify never
// blocks, and after any number of Notify calls a receive from the channel
// succeeds once. It lets a producer built before its consumer (the Hub's
// OnChange, before the ClusterDirectory that reads the Hub) be wired
// without a setter: both are given the same Signal at construction.
// A nil Signal never fires and ignores Notify.
type Signal chan struct{}

// NewSignal returns a Signal that has not fired.
func NewSignal() Signal { return make(Signal, 1) }

// Notify fires the signal; it never blocks.
func (s Signal) Notify() {
	select {
	case s <- struct{}{}:
	default:
	}
}
