package tasks

// Queued is what the stream queues of every task here are charged now, in
// bytes (each chunk its delta plus ChunkOverhead): the tests' look at the
// stream queues' bound.
func (t *Tracker) Queued() int64 { return t.queued.Load() }
