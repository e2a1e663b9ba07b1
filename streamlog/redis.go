package streamlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the Log of a cluster, on Redis Streams. Per task, under the
// hash tag of its id (so that both keys, and the scripts that touch them,
// share a slot on Redis Cluster):
//
//	{ns}:stream:{<task id>}       stream: entry 0-<seq> holds d=<chunk>, or e=<final JSON> for the end
//	{ns}:stream:{<task id>}:meta  hash: n (chunks), b (their bytes), e (the end's seq, once ended)
//	{ns}:stream:{<task id>}:n     pub/sub channel: "<seq>" on each entry, to wake readers
//
// Both keys get the TTL on each append and the grace on the end.
//
// Following is not XREAD BLOCK: a blocked XREAD holds a pooled connection
// for as long as it waits, so 1,000 readers would take 1,000 connections
// (or starve the rest of the instance of its pool). Instead each Log holds
// one pub/sub connection, subscribed to the channels of the tasks its
// readers follow (one subscription per task, however many read it); a
// message, or the confirmation of a (re)subscription, wakes that task's
// readers, which then read what follows their last seq with a
// non-blocking XREAD. Whatever was written between a reader's read and its
// subscription, or while the connection was down, is read on the
// confirmation that follows. The channels are classic pub/sub, which on a
// Redis Cluster reaches a subscriber on any node (sharded pub/sub would
// need a connection per slot); the price is that each entry's small
// notice crosses the cluster bus.
//
// NewRedis starts nothing: Append, End and Ended work at once, and a Read
// waits for Run, which holds the pub/sub connection.
type Redis struct {
	rdb redis.UniversalClient
	ns  string
	cfg Config

	started chan struct{} // closed once Run holds ps
	done    chan struct{} // closed by Close

	mu      sync.Mutex
	ps      *redis.PubSub // Run's; nil before it
	closed  bool
	readers map[string]map[chan struct{}]struct{} // channel → the wake-ups of its readers
}

var _ Log = (*Redis)(nil)

// Key is the stream key of a task's log.
func Key(ns, taskID string) string { return ns + ":stream:{" + taskID + "}" }

func metaKey(ns, taskID string) string { return Key(ns, taskID) + ":meta" }

// Channel is the pub/sub channel that announces a task's new entries.
func Channel(ns, taskID string) string { return Key(ns, taskID) + ":n" }

// NewRedis returns the log on rdb (a client or a cluster client), its keys
// under ns (bus.DefaultNamespace in a deployment). Run follows it; the
// client stays open when it stops.
func NewRedis(rdb redis.UniversalClient, ns string, cfg Config) *Redis {
	return &Redis{rdb: rdb, ns: ns, cfg: cfg.withDefaults(), started: make(chan struct{}), done: make(chan struct{}),
		readers: map[string]map[chan struct{}]struct{}{}}
}

// Run implements Log: it holds the pub/sub connection that wakes readers,
// and hands on each notice, until ctx ends or Close is called. Run once.
func (r *Redis) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.closed || r.ps != nil {
		r.mu.Unlock()
		return nil // closed already, or run already
	}
	// With no channel yet, this does no I/O: the first Read subscribes.
	r.ps = r.rdb.Subscribe(ctx)
	msgs := r.ps.ChannelWithSubscriptions()
	close(r.started)
	r.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = r.Close() })
	defer stop()
	for m := range msgs { // ends when Close closes the subscription
		switch m := m.(type) {
		case *redis.Message:
			r.wake(m.Channel)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				r.wake(m.Channel)
			}
		}
	}
	return nil
}

func (r *Redis) wake(channel string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.readers[channel] {
		select {
		case w <- struct{}{}:
		default: // it has a wake-up pending already
		}
	}
}

// watch registers a reader of channel, subscribing to it for the first.
// It waits for Run to hold the subscription.
func (r *Redis) watch(ctx context.Context, channel string) (chan struct{}, error) {
	select {
	case <-r.started:
	case <-r.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	w := make(chan struct{}, 1)
	set := r.readers[channel]
	if set == nil {
		// Under mu, so a subscribe and an unsubscribe of one channel go out
		// in the order the readers came and went.
		if err := r.ps.Subscribe(ctx, channel); err != nil {
			return nil, fmt.Errorf("streamlog: subscribe: %w", err)
		}
		set = map[chan struct{}]struct{}{}
		r.readers[channel] = set
	}
	set[w] = struct{}{}
	return w, nil
}

// unwatch forgets a reader of channel, unsubscribing from it after the
// last. ctx is the reader's: it may have ended (that may be why the read
// ended), and the unsubscribe goes out all the same, bounded.
func (r *Redis) unwatch(ctx context.Context, channel string, w chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.readers[channel]
	delete(set, w)
	if len(set) == 0 {
		delete(r.readers, channel)
		if !r.closed {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unsubscribeTimeout)
			_ = r.ps.Unsubscribe(uctx, channel) // best effort: a stray message wakes no one
			cancel()
		}
	}
}

// unsubscribeTimeout bounds the unsubscribe after a channel's last reader.
const unsubscribeTimeout = 2 * time.Second

var appendScript = redis.NewScript(`
local m = redis.call('HMGET', KEYS[2], 'n', 'b', 'e')
if m[3] then return -1 end
local n = tonumber(m[1]) or 0
local b = tonumber(m[2]) or 0
if n >= tonumber(ARGV[2]) then return -2 end
if b + string.len(ARGV[1]) > tonumber(ARGV[3]) then return -3 end
n = n + 1
redis.call('XADD', KEYS[1], '0-' .. n, 'd', ARGV[1])
redis.call('HSET', KEYS[2], 'n', n, 'b', b + string.len(ARGV[1]))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('PUBLISH', ARGV[5], n)
return n
`)

var endScript = redis.NewScript(`
local m = redis.call('HMGET', KEYS[2], 'n', 'e')
if m[2] then return -1 end
local n = (tonumber(m[1]) or 0) + 1
redis.call('XADD', KEYS[1], '0-' .. n, 'e', ARGV[1])
redis.call('HSET', KEYS[2], 'e', n)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[3], n)
return n
`)

func (r *Redis) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Append implements Log.
func (r *Redis) Append(ctx context.Context, taskID, data string) (int64, error) {
	if r.isClosed() {
		return 0, ErrClosed
	}
	n, err := appendScript.Run(ctx, r.rdb, []string{Key(r.ns, taskID), metaKey(r.ns, taskID)},
		data, r.cfg.MaxChunks, r.cfg.MaxBytes, r.cfg.TTL.Milliseconds(), Channel(r.ns, taskID)).Int64()
	switch {
	case err != nil:
		return 0, fmt.Errorf("streamlog: append: %w", err)
	case n == -1:
		return 0, ErrEnded
	case n == -2:
		return 0, checkLimits(r.cfg, r.cfg.MaxChunks, 0, 0)
	case n == -3:
		return 0, checkLimits(r.cfg, 0, r.cfg.MaxBytes, len(data))
	}
	return n, nil
}

// End implements Log.
func (r *Redis) End(ctx context.Context, taskID string, final []byte) error {
	if err := checkFinal(r.cfg, final); err != nil {
		return err
	}
	if r.isClosed() {
		return ErrClosed
	}
	n, err := endScript.Run(ctx, r.rdb, []string{Key(r.ns, taskID), metaKey(r.ns, taskID)},
		final, r.cfg.Grace.Milliseconds(), Channel(r.ns, taskID)).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("streamlog: end: %w", err)
	case n == -1:
		return ErrEnded
	}
	return nil
}

// Ended implements Log.
func (r *Redis) Ended(ctx context.Context, taskID string) (int64, error) {
	if r.isClosed() {
		return 0, ErrClosed
	}
	e, err := r.rdb.HGet(ctx, metaKey(r.ns, taskID), "e").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("streamlog: ended: %w", err)
	}
	return e, nil
}

// readBatch is how many entries one XREAD returns at most.
const readBatch = 512

// Read implements Log.
func (r *Redis) Read(ctx context.Context, taskID string, after int64, fn func(Entry) error) error {
	ch := Channel(r.ns, taskID)
	// Subscribed before the first read: an entry written after that read
	// wakes this reader (or the confirmation does, if it came first).
	w, err := r.watch(ctx, ch)
	if err != nil {
		return err
	}
	defer r.unwatch(ctx, ch, w)
	for {
		batch, ended, err := r.fetch(ctx, taskID, after)
		if err != nil {
			return err
		}
		for _, e := range batch {
			if err := fn(e); err != nil {
				return err
			}
			after = e.Seq
			if e.End {
				return nil
			}
		}
		if ended {
			return nil // it ended at or before after
		}
		if len(batch) == readBatch {
			continue // more may be there already
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.done:
			return ErrClosed
		case <-w:
		}
	}
}

// fetch reads the entries after seq after; with none, ended says whether
// the log has ended (at or before after).
func (r *Redis) fetch(ctx context.Context, taskID string, after int64) ([]Entry, bool, error) {
	res, err := r.rdb.XRead(ctx, &redis.XReadArgs{
		Streams: []string{Key(r.ns, taskID), "0-" + strconv.FormatInt(max(after, 0), 10)},
		Count:   readBatch, Block: -1, // -1: no BLOCK argument
	}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("streamlog: read: %w", err)
	}
	var batch []Entry
	for _, s := range res {
		for _, m := range s.Messages {
			e, err := entryOf(m)
			if err != nil {
				return nil, false, err
			}
			batch = append(batch, e)
		}
	}
	if len(batch) > 0 {
		return batch, false, nil
	}
	e, err := r.rdb.HGet(ctx, metaKey(r.ns, taskID), "e").Result()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("streamlog: read: %w", err)
	}
	// The end may have been written between the XREAD and now: the log
	// has ended before after only if its end's seq says so.
	end, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		return nil, false, fmt.Errorf("streamlog: %s has end %q", metaKey(r.ns, taskID), e)
	}
	if end > after {
		return r.fetch(ctx, taskID, after) // once: the end is there now
	}
	return nil, true, nil
}

// entryOf decodes one stream entry, written by the scripts above.
func entryOf(m redis.XMessage) (Entry, error) {
	ms, seq, ok := strings.Cut(m.ID, "-")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || ms != "0" || err != nil || n < 1 {
		return Entry{}, fmt.Errorf("streamlog: an entry with id %q, not 0-<seq>", m.ID)
	}
	if d, ok := m.Values["d"].(string); ok {
		return Entry{Seq: n, Data: d}, nil
	}
	if f, ok := m.Values["e"].(string); ok {
		return Entry{Seq: n, End: true, Final: []byte(f)}, nil
	}
	return Entry{}, fmt.Errorf("streamlog: entry %s has neither d nor e", m.ID)
}

// Close implements Log: reads in progress end with ErrClosed, and Run's
// subscription closes (Run returns once it has stopped).
func (r *Redis) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.done)
		if r.ps != nil {
			_ = r.ps.Close()
		}
	}
	r.mu.Unlock()
	return nil
}
