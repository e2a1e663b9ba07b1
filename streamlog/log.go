package streamlog

import (
	"context"
	"errors"
	"time"
)

// Entry is one entry of a task's log: a chunk (Data), or the end (End,
// with the task's final JSON in Final). Seq numbers them from 1; the end
// entry's Seq is one past the last chunk's.
type Entry struct {
	Seq   int64
	Data  string
	End   bool
	Final []byte
}

// Log is the chunk log of resumable streams.
type Log interface {
	// Append adds a chunk to taskID's log (creating it) and returns its
	// seq: 1, 2, 3… per task. It refreshes the log's TTL. Past the end it
	// fails with ErrEnded; past a bound with ErrLimit.
	Append(ctx context.Context, taskID, data string) (int64, error)
	// End closes taskID's log with the task's final JSON (a valid JSON
	// value, else ErrInvalidFinal): no chunk is appended after it. The log
	// is then kept for the grace period. A second End fails with ErrEnded.
	End(ctx context.Context, taskID string, final []byte) error
	// Read calls fn with every entry after seq after, in order, and then
	// with each new one as it is written, until it has passed the end
	// entry (then it returns nil), ctx ends (ctx.Err()) or fn fails (its
	// error). A log that has ended at or before after returns nil at once,
	// calling fn for nothing. A log that does not exist (not started yet,
	// or expired) reads as empty: Read waits for its first entry, so the
	// caller bounds the wait with ctx.
	Read(ctx context.Context, taskID string, after int64, fn func(Entry) error) error
	// Ended returns the seq of taskID's end entry, or 0 while it has none
	// (or no log at all).
	Ended(ctx context.Context, taskID string) (int64, error)
	// Run serves what Read needs to follow a log live until ctx ends (on
	// Redis, its one pub/sub connection), then closes the log as Close
	// does, and returns nil once everything it started has stopped. The
	// rest works before Run; a Read waits for it to follow anything.
	// Memory needs nothing run: its Run only waits for ctx.
	Run(ctx context.Context) error
	// Close releases what the log holds; it is idempotent. Reads in
	// progress end with ErrClosed, and so does every call after it.
	Close() error
}

var (
	// ErrEnded: the task's log has its end entry already.
	ErrEnded = errors.New("streamlog: the stream has ended")
	// ErrLimit: a chunk would take the task past MaxChunks or MaxBytes.
	ErrLimit = errors.New("streamlog: stream limit reached")
	// ErrInvalidFinal: End was given something that is not JSON.
	ErrInvalidFinal = errors.New("streamlog: the final result is not valid JSON")
	// ErrClosed: the Log was closed.
	ErrClosed = errors.New("streamlog: closed")
)

// Config bounds and times every task's log. Zero fields take
// DefaultConfig's values.
type Config struct {
	// TTL is how long a log that is still being written is kept after
	// its last chunk (default 1h: longer than any stream may run, so a
	// task whose instance died without End is forgotten in time).
	TTL time.Duration
	// Grace is how long a log is kept after its end entry (default
	// 10m), for clients that reconnect late.
	Grace time.Duration
	// MaxChunks caps the chunks of one task (default 16,384).
	MaxChunks int64
	// MaxBytes caps the bytes of one task's chunks together (default
	// 2 MiB, twice the default --result-max-bytes); the final JSON is
	// bounded by MaxBytes too, on its own.
	MaxBytes int64
}

// DefaultConfig holds every default of a Log.
func DefaultConfig() Config {
	return Config{TTL: time.Hour, Grace: 10 * time.Minute, MaxChunks: 16_384, MaxBytes: 2 << 20}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.TTL <= 0 {
		c.TTL = d.TTL
	}
	if c.Grace <= 0 {
		c.Grace = d.Grace
	}
	if c.MaxChunks <= 0 {
		c.MaxChunks = d.MaxChunks
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = d.MaxBytes
	}
	return c
}
