package streamlog

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Memory is the Log of one instance alone. Expired logs are dropped when
// they are next touched, and by a sweep of all at most once a minute (on
// any call), so it needs no goroutine of its own.
type Memory struct {
	cfg Config
	now func() time.Time

	mu        sync.Mutex
	logs      map[string]*memLog
	nextSweep time.Time
	closed    bool
	done      chan struct{} // closed by Close: wakes every reader
}

var _ Log = (*Memory)(nil)

type memLog struct {
	entries []Entry // entries[i].Seq == i+1
	bytes   int64
	ended   bool
	expires time.Time
	wake    chan struct{} // closed and replaced on each entry
}

// NewMemory returns an empty Memory log.
func NewMemory(cfg Config) *Memory {
	return &Memory{cfg: cfg.withDefaults(), now: time.Now, logs: map[string]*memLog{}, done: make(chan struct{})}
}

// logLocked returns taskID's live log, made empty if there is none or it
// has expired, and sweeps every expired log at most once a minute.
func (m *Memory) logLocked(taskID string) *memLog {
	now := m.now()
	l := m.logs[taskID]
	if l != nil && !now.Before(l.expires) {
		delete(m.logs, taskID)
		close(l.wake) // its readers start over on the empty log
		l = nil
	}
	if l == nil {
		l = &memLog{wake: make(chan struct{}), expires: now.Add(m.cfg.TTL)}
		m.logs[taskID] = l
	}
	if !now.Before(m.nextSweep) {
		m.nextSweep = now.Add(time.Minute)
		for id, o := range m.logs {
			if !now.Before(o.expires) {
				delete(m.logs, id)
				close(o.wake)
			}
		}
	}
	return l
}

func (l *memLog) addLocked(e Entry, expires time.Time) {
	l.entries = append(l.entries, e)
	l.expires = expires
	close(l.wake)
	l.wake = make(chan struct{})
}

// Append implements Log.
func (m *Memory) Append(ctx context.Context, taskID, data string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	l := m.logLocked(taskID)
	if l.ended {
		return 0, ErrEnded
	}
	if err := checkLimits(m.cfg, int64(len(l.entries)), l.bytes, len(data)); err != nil {
		return 0, err
	}
	seq := int64(len(l.entries)) + 1
	l.bytes += int64(len(data))
	l.addLocked(Entry{Seq: seq, Data: data}, m.now().Add(m.cfg.TTL))
	return seq, nil
}

// checkLimits says whether one more chunk of n bytes fits after chunks
// chunks of bytes bytes.
func checkLimits(cfg Config, chunks, bytes int64, n int) error {
	if chunks >= cfg.MaxChunks {
		return fmt.Errorf("%w: the stream has %d chunks, the most it may hold", ErrLimit, cfg.MaxChunks)
	}
	if bytes+int64(n) > cfg.MaxBytes {
		return fmt.Errorf("%w: a chunk of %d bytes would take the stream past %d bytes", ErrLimit, n, cfg.MaxBytes)
	}
	return nil
}

func checkFinal(cfg Config, final []byte) error {
	if int64(len(final)) > cfg.MaxBytes {
		return fmt.Errorf("%w: the final result of %d bytes is over %d", ErrLimit, len(final), cfg.MaxBytes)
	}
	if !json.Valid(final) {
		return ErrInvalidFinal
	}
	return nil
}

// End implements Log.
func (m *Memory) End(ctx context.Context, taskID string, final []byte) error {
	if err := checkFinal(m.cfg, final); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	l := m.logLocked(taskID)
	if l.ended {
		return ErrEnded
	}
	l.ended = true
	l.addLocked(Entry{Seq: int64(len(l.entries)) + 1, End: true, Final: append([]byte(nil), final...)}, m.now().Add(m.cfg.Grace))
	return nil
}

// Read implements Log.
func (m *Memory) Read(ctx context.Context, taskID string, after int64, fn func(Entry) error) error {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return ErrClosed
		}
		// A reader of a log not written yet makes it (empty), so that it
		// has something to wake on; only authorised readers get here.
		l := m.logLocked(taskID)
		var batch []Entry
		if after < int64(len(l.entries)) {
			batch = l.entries[max(after, 0):] // entries never change once written: safe to read unlocked
		}
		wake, ended := l.wake, l.ended
		m.mu.Unlock()
		for _, e := range batch {
			if err := fn(e); err != nil {
				return err
			}
			after = e.Seq
			if e.End {
				return nil
			}
		}
		if ended && len(batch) == 0 {
			return nil // it ended at or before after
		}
		if err := m.wait(ctx, wake); err != nil {
			return err
		}
	}
}

func (m *Memory) wait(ctx context.Context, wake <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-m.done:
		return ErrClosed
	case <-wake:
	}
	return nil
}

// Ended implements Log.
func (m *Memory) Ended(ctx context.Context, taskID string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	l := m.logs[taskID]
	if l == nil || !l.ended || !m.now().Before(l.expires) {
		return 0, nil
	}
	return int64(len(l.entries)), nil
}

// Run implements Log: Memory runs nothing; it closes when ctx ends.
func (m *Memory) Run(ctx context.Context) error {
	<-ctx.Done()
	return m.Close()
}

// Close implements Log.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.done)
	}
	return nil
}
