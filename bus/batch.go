package bus

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The publishes of an instance go to Redis in pipelines: every publish
// waiting when a pipeline leaves goes with it, so under load one round trip
// carries many envelopes (one write and one read on each side instead of
// one per envelope), and a burst waits in a queue instead of taking a
// connection each. Taking a pooled connection per publish, a burst at
// 2,500 cross-instance requests/s on two cores drained the pool (20
// connections), the waiters timed out after a second, and the instance
// never caught up.
const (
	// batchMax is the most publishes one pipeline carries.
	batchMax = 128
	// pipelines is how many pipelines may be in flight at once: more than
	// one, so that a batch stuck on a slow master of a cluster does not hold
	// up the rest. Each publish still returns only once Redis has answered
	// it, so the envelopes of one caller keep their order (a node's reader
	// publishes a stream's chunks one after another).
	pipelines = 2
	// batchQueue bounds the publishes waiting for a pipeline; a publish that
	// finds it full waits for room (or for its context).
	batchQueue = 4096
)

// pub is one publish waiting for its pipeline.
type pub struct {
	channel string
	payload []byte
	n       int64
	err     error
	done    chan struct{} // cap 1: the answer is in n and err
}

var pubPool = sync.Pool{New: func() any { return &pub{done: make(chan struct{}, 1)} }}

// batcher sends the queued publishes in pipelines. A publish that finds
// nothing queued and a pipeline free is sent at once from its caller's
// goroutine: handing it to a run goroutine and the answer back may wake
// two other threads, and such wakeups were about a third of an instance's
// CPU at 2,500 requests/s on two cores (docs/BENCHMARKS.md, "the floor, and
// fewer hand-offs"). Under load the queue is not empty and the run
// goroutines batch as before.
type batcher struct {
	rdb     redis.UniversalClient
	sharded bool
	q       chan *pub
	// inFlight holds a token per pipeline under way, the run goroutines'
	// and the direct publishers' together: at most pipelines.
	inFlight chan struct{}
	closed   chan struct{} // closed with the bus: nothing more is sent
	once     sync.Once
	// timeout bounds one pipeline's round trip (the client's own read and
	// write timeouts bound it too).
	timeout time.Duration
}

func newBatcher(rdb redis.UniversalClient, sharded bool) *batcher {
	return &batcher{rdb: rdb, sharded: sharded, q: make(chan *pub, batchQueue), inFlight: make(chan struct{}, pipelines),
		closed: make(chan struct{}), timeout: 5 * time.Second}
}

// close stops taking publishes (the bus's Run is ending).
func (b *batcher) close() { b.once.Do(func() { close(b.closed) }) }

func (b *batcher) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

// run sends the queued publishes in pipelines until ctx (the bus's Run's)
// ends; Run starts it pipelines times. What is queued then is answered
// with ErrClosed.
func (b *batcher) run(ctx context.Context) {
	batch := make([]*pub, 0, batchMax)
	for {
		select {
		case <-ctx.Done():
			b.drain(ErrClosed)
			return
		case p := <-b.q:
			batch = append(batch[:0], p)
		}
		select {
		case b.inFlight <- struct{}{}:
		case <-ctx.Done():
			for _, p := range batch {
				p.err = ErrClosed
				p.done <- struct{}{}
			}
			b.drain(ErrClosed)
			return
		}
		batch = b.fill(batch)
		b.send(ctx, batch)
		<-b.inFlight
		clear(batch)
	}
}

// fill adds what is queued to batch, up to batchMax, without waiting.
func (b *batcher) fill(batch []*pub) []*pub {
	for len(batch) < batchMax {
		select {
		case p := <-b.q:
			batch = append(batch, p)
		default:
			return batch
		}
	}
	return batch
}

// send runs one pipeline and answers each of its publishes.
func (b *batcher) send(ctx context.Context, batch []*pub) {
	pctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	cmds := make([]*redis.IntCmd, len(batch))
	_, _ = b.rdb.Pipelined(pctx, func(pl redis.Pipeliner) error {
		for i, p := range batch {
			if b.sharded {
				cmds[i] = pl.SPublish(pctx, p.channel, p.payload)
			} else {
				cmds[i] = pl.Publish(pctx, p.channel, p.payload)
			}
		}
		return nil
	})
	for i, p := range batch {
		p.n, p.err = cmds[i].Result()
		p.done <- struct{}{}
	}
}

// drain answers whatever is still queued with err.
func (b *batcher) drain(err error) {
	for {
		select {
		case p := <-b.q:
			p.err = err
			p.done <- struct{}{}
		default:
			return
		}
	}
}

// publish sends one publish (itself, or through the queue) and waits for
// Redis's answer: the number of subscribers that received it. A caller
// whose ctx ends first gets ctx's error; the envelope may still be
// delivered. A publish that must queue before the bus runs waits for Run.
func (b *batcher) publish(ctx context.Context, channel string, payload []byte) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(b.q) == 0 && !b.isClosed() {
		select {
		case b.inFlight <- struct{}{}:
			// Direct: the caller waits for Redis's answer either way. It
			// sends its publish alone, so that its context bounds it (as
			// it bounds the wait for a queued one) without failing anyone
			// else's.
			pctx, cancel := context.WithTimeout(ctx, b.timeout)
			var cmd *redis.IntCmd
			if b.sharded {
				cmd = b.rdb.SPublish(pctx, channel, payload)
			} else {
				cmd = b.rdb.Publish(pctx, channel, payload)
			}
			cancel()
			<-b.inFlight
			return cmd.Result()
		default:
		}
	}
	p := pubPool.Get().(*pub)
	p.channel, p.payload = channel, payload
	stop := b.closed
	select {
	case b.q <- p:
	case <-ctx.Done():
		p.channel, p.payload = "", nil
		pubPool.Put(p)
		return 0, ctx.Err()
	case <-stop:
		p.channel, p.payload = "", nil
		pubPool.Put(p)
		return 0, ErrClosed
	}
	select {
	case <-p.done:
		n, err := p.n, p.err
		*p = pub{done: p.done}
		pubPool.Put(p)
		return n, err
	case <-ctx.Done():
		// The pipeline still holds p and will answer it: p is not reused.
		return 0, ctx.Err()
	case <-stop:
		// p may never be answered (the pipelines have stopped): not reused.
		return 0, ErrClosed
	}
}
