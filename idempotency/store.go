package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// Store keeps the claims and answers of idempotency keys, per scope.
// A key is opaque to the store; a fingerprint (fp) says which request
// claimed it, so that the same key with another request is told apart.
type Store interface {
	// Begin claims key in scope for the request fp, if no record holds it:
	// the answer is Claimed, with the token the holder renews, completes or
	// releases by. Otherwise it says what holds the key: Running (its
	// holder's token), Done (its answer), Mismatch (another fp claimed
	// it), or Full (scope holds MaxKeys keys already).
	Begin(ctx context.Context, scope, key, fp string) (State, error)
	// Renew extends the claim token's lease by Config.Lease from now;
	// ErrNotHeld if the claim has lapsed, been released or completed.
	Renew(ctx context.Context, scope, key, token string) error
	// Complete stores the answer of the claim token and ends the claim;
	// the record is kept for Config.TTL. ErrNotHeld if the claim is no
	// longer held; ErrTooLarge if the answer is over the bounds.
	Complete(ctx context.Context, scope, key, token string, a Answer) error
	// Release drops the claim token, so that the next request with key
	// runs; releasing what is not held is a no-op.
	Release(ctx context.Context, scope, key, token string) error
	// Wait waits while the claim token holds key and returns the answer it
	// stored for fp; ErrReleased if the claim ended without one (released,
	// lapsed, or the key taken since by another request), ctx's error if
	// ctx ends first.
	Wait(ctx context.Context, scope, key, fp, token string) (Answer, error)
}

// Kind is what Begin found.
type Kind int

const (
	Claimed  Kind = iota + 1 // the caller holds the key: run, then Complete or Release
	Running                  // another request holds the key (State.Token)
	Done                     // the key's answer is stored (State.Answer)
	Mismatch                 // the key was claimed by a request with another fingerprint
	Full                     // the scope holds Config.MaxKeys keys already
)

func (k Kind) String() string {
	switch k {
	case Claimed:
		return "claimed"
	case Running:
		return "running"
	case Done:
		return "done"
	case Mismatch:
		return "mismatch"
	case Full:
		return "full"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// State is what Begin found, and for Claimed the caller's token.
type State struct {
	Kind   Kind
	Token  string // Claimed: the caller's; Running: the holder's
	Answer Answer // Done
}

// Answer is what a request answered: its status, the headers that matter
// to a replay (canonical names), and its body.
type Answer struct {
	Status int
	Header map[string]string
	Body   []byte
}

// Limits of an answer's headers (the body's is Config.MaxAnswerBytes).
const (
	MaxHeaders     = 16
	MaxHeaderBytes = 4096 // a header's name and value together
)

// Errors.
var (
	ErrNotHeld  = errors.New("idempotency: the claim is no longer held")
	ErrReleased = errors.New("idempotency: the claim ended without an answer")
	ErrTooLarge = errors.New("idempotency: the answer is over the bounds")
	ErrBadScope = errors.New("idempotency: a scope must be non-empty and hold no braces")
)

// Config configures a Store. Zero values take the defaults shown.
type Config struct {
	TTL            time.Duration // default 24h: how long an answer (and its key's place in the count) is kept
	Lease          time.Duration // default 5s: a claim not renewed for this long lapses
	MaxKeys        int           // default 10,000: keys one scope may hold at once
	MaxAnswerBytes int           // default 1 MiB + 64 KiB: the largest answer body kept
	// Poll is the longest a waiter goes without looking at the record
	// (default 200ms); it looks sooner when its own store's holder ends.
	Poll time.Duration
	// Now is the Memory store's clock (default time.Now). Redis keeps
	// its own (TIME and key expiry).
	Now func() time.Time
}

// Default values of Config.
const (
	DefaultTTL            = 24 * time.Hour
	DefaultLease          = 5 * time.Second
	DefaultMaxKeys        = 10_000
	DefaultMaxAnswerBytes = 1<<20 + 64<<10
	DefaultPoll           = 200 * time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxAnswerBytes <= 0 {
		c.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// checkAnswer holds a to the bounds, before it is stored or after it is read.
func (c Config) checkAnswer(a Answer) error {
	if a.Status < 100 || a.Status > 599 {
		return fmt.Errorf("%w: status %d", ErrTooLarge, a.Status)
	}
	if len(a.Body) > c.MaxAnswerBytes {
		return fmt.Errorf("%w: a body of %d bytes, at most %d", ErrTooLarge, len(a.Body), c.MaxAnswerBytes)
	}
	if len(a.Header) > MaxHeaders {
		return fmt.Errorf("%w: %d headers, at most %d", ErrTooLarge, len(a.Header), MaxHeaders)
	}
	for k, v := range a.Header {
		if len(k)+len(v) > MaxHeaderBytes || k == "" || k != textproto.CanonicalMIMEHeaderKey(k) {
			return fmt.Errorf("%w: header %.64q", ErrTooLarge, k)
		}
	}
	return nil
}

func checkScope(scope string) error {
	if scope == "" || strings.ContainsAny(scope, "{}") {
		return ErrBadScope
	}
	return nil
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// settle judges, for a waiter of the claim token for fp, a record as it
// is now: its answer (done), or keep waiting (wait), or ErrReleased.
func settle(r record, found bool, fp, token string) (a Answer, done, wait bool) {
	switch {
	case !found || r.fp != fp:
		return Answer{}, false, false
	case r.done:
		return r.answer, true, false
	case r.token == token:
		return Answer{}, false, true
	}
	return Answer{}, false, false // another request holds it now: ours ended without an answer
}

// record is one key's record, in either store.
type record struct {
	fp, token string
	done      bool
	answer    Answer
}

// waitLoop looks at the record with look until settle decides, between
// looks waiting for wake (the store's own holders ending) or poll.
func waitLoop(ctx context.Context, poll time.Duration, wake func() <-chan struct{}, look func() (record, bool, error), fp, token string) (Answer, error) {
	d := min(10*time.Millisecond, poll)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		ch := wake() // before the look, so that an end between the two is not missed
		r, found, err := look()
		if err != nil {
			return Answer{}, err
		}
		a, done, wait := settle(r, found, fp, token)
		if done {
			return a, nil
		}
		if !wait {
			return Answer{}, ErrReleased
		}
		t.Reset(d)
		select {
		case <-ctx.Done():
			return Answer{}, ctx.Err()
		case <-ch:
		case <-t.C:
			d = min(2*d, poll)
		}
	}
}
