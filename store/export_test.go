package store

// Rated adds a rating to the nodes' in-memory counters, as Rate does after
// the store has taken it: the tests' way to set counters without a task.
func (r *Reputation) Rated(nodeIDs []string, rating int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ratedLocked(nodeIDs, rating)
}
