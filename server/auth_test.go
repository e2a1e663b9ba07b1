package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// An adversarial client sends 150 made-up keys from one address: it is
// refused with 429 and Retry-After well before the 150th, and the store
// sees a bounded number of lookups (about the failure limit), not one per
// key. A valid key from the same address still works.
func TestAuthFailuresLimitedPerIP(t *testing.T) {
	ta := startApp(t, nil)
	good := ta.account(t, "good", "")
	if code, _ := ta.call(t, "GET", "/api/v1/account", good, nil, nil); code != 200 {
		t.Fatalf("valid key: HTTP %d", code)
	}
	before := ta.auth.lookups.Load()
	first429 := 0
	for i := 1; i <= 150; i++ {
		var e apiErr
		code, h := ta.call(t, "GET", "/api/v1/account", "gn_"+randomHex(16), nil, &e)
		switch code {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			if first429 == 0 {
				first429 = i
			}
			if h.Get("Retry-After") == "" || e.Error.Code != "rate_limited" {
				t.Fatalf("429 without Retry-After or code: %+v %v", e, h)
			}
		default:
			t.Fatalf("made-up key %d: HTTP %d", i, code)
		}
	}
	lookups := ta.auth.lookups.Load() - before
	t.Logf("first 429 at attempt %d; %d store lookups for 150 made-up keys", first429, lookups)
	if first429 == 0 || first429 > defaultAuthFailures.Rate+1 {
		t.Errorf("first 429 at attempt %d, want by attempt %d", first429, defaultAuthFailures.Rate+1)
	}
	// The limit refills slowly (one per 3 s): a few more may pass while the
	// loop runs, never one per key.
	if max := int64(defaultAuthFailures.Rate + 10); lookups > max {
		t.Errorf("150 made-up keys cost %d store lookups, want at most %d", lookups, max)
	}
	// A valid, cached key from the same address is not refused.
	if code, _ := ta.call(t, "GET", "/api/v1/account", good, nil, nil); code != 200 {
		t.Errorf("valid key from the limited address: HTTP %d", code)
	}
}

// countingAuthStore answers Authenticate for one valid key, counts lookups,
// and can be made unavailable.
type countingAuthStore struct {
	store.Store
	valid   string
	lookups atomic.Int64
	down    atomic.Bool
}

func (s *countingAuthStore) Authenticate(ctx context.Context, key string) (store.Account, error) {
	s.lookups.Add(1)
	switch {
	case s.down.Load():
		return store.Account{}, fmt.Errorf("%w: stalled", store.ErrUnavailable)
	case key == s.valid:
		return store.Account{ID: "acct-valid"}, nil
	}
	return store.Account{}, store.ErrNotFound
}

// 50,000 distinct unknown keys cannot evict a valid key from the cache:
// unknown keys have a bounded cache of their own.
func TestAuthUnknownKeysCannotEvictValid(t *testing.T) {
	st := &countingAuthStore{valid: "gn_valid"}
	c := newAuthCache(st, defaultAuthFailures)
	ctx := context.Background()
	if a, err := c.authenticate(ctx, st.valid); err != nil || a.ID != "acct-valid" {
		t.Fatalf("valid key: %v %v", a, err)
	}
	for i := range 50_000 {
		if _, err := c.authenticate(ctx, fmt.Sprintf("gn_unknown_%d", i)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown key %d: %v", i, err)
		}
	}
	c.mu.Lock()
	neg, pos := len(c.neg), len(c.pos)
	c.mu.Unlock()
	if neg > authMaxNegative || pos != 1 {
		t.Errorf("caches after the flood: %d unknown (max %d), %d valid (want 1)", neg, authMaxNegative, pos)
	}
	before := st.lookups.Load()
	if a, err := c.authenticate(ctx, st.valid); err != nil || a.ID != "acct-valid" {
		t.Fatalf("valid key after the flood: %v %v", a, err)
	}
	if st.lookups.Load() != before {
		t.Error("the flood of unknown keys evicted the valid key: it cost a store lookup")
	}
}

// While the store cannot answer, a key whose cache entry has expired keeps
// working (stale rather than failing), a key never seen gets the store's
// error, and an unknown key is not cached as unknown on a failure.
func TestAuthServesStaleWhileStoreDown(t *testing.T) {
	st := &countingAuthStore{valid: "gn_valid"}
	c := newAuthCache(st, defaultAuthFailures)
	ctx := context.Background()
	if _, err := c.authenticate(ctx, st.valid); err != nil {
		t.Fatal(err)
	}
	// Expire the entry, as 30 s would.
	c.mu.Lock()
	e := c.pos[keyHash(st.valid)]
	e.expires = time.Now().Add(-time.Minute)
	c.pos[keyHash(st.valid)] = e
	c.mu.Unlock()

	st.down.Store(true)
	if a, err := c.authenticate(ctx, st.valid); err != nil || a.ID != "acct-valid" {
		t.Fatalf("expired key with the store down: %v %v, want served stale", a, err)
	}
	if _, err := c.authenticate(ctx, "gn_never_seen"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("never-seen key with the store down: %v, want ErrUnavailable", err)
	}
	st.down.Store(false)
	if _, err := c.authenticate(ctx, "gn_never_seen"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("never-seen key after recovery: %v, want ErrNotFound (not a cached failure)", err)
	}
	// A key found revoked once the store answers is dropped at once.
	st.valid = "gn_other"
	if _, err := c.authenticate(ctx, "gn_valid"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoked key after recovery: %v, want ErrNotFound", err)
	}
}

// Concurrent authentications are safe (run with -race).
func TestAuthCacheConcurrent(t *testing.T) {
	st := &countingAuthStore{valid: "gn_valid"}
	c := newAuthCache(st, defaultAuthFailures)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 500 {
				if a, err := c.authenticate(context.Background(), fmt.Sprintf("gn_%d_%d", i, j%50)); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("an unknown key, from goroutine %d: %+v, %v; want store.ErrNotFound", i, a, err)
					return
				}
				if a, err := c.authenticate(context.Background(), st.valid); err != nil || a.ID != "acct-valid" {
					t.Errorf("the valid key, from goroutine %d: %+v, %v", i, a, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := c.len(); n != 1 {
		t.Errorf("%d valid keys cached after the race, want the one", n)
	}
}

// Open registration refuses a NUL byte in the email with 400 and a clear
// message, not a 500 from the database.
func TestRegisterRefusesNUL(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.OpenRegistration = true })
	var e apiErr
	code, _ := ta.call(t, "POST", "/api/v1/register", "", `{"email":"a\u0000b@example.com"}`, &e)
	if code != http.StatusBadRequest || e.Error.Code != "invalid_request" || e.Error.Message == "" {
		t.Errorf("register with a NUL in the email: HTTP %d %+v, want 400", code, e)
	}
	var ok map[string]string
	if code, _ := ta.call(t, "POST", "/api/v1/register", "", `{"email":"fine@example.com"}`, &ok); code != 200 || ok["api_key"] == "" {
		t.Errorf("register with a valid email: HTTP %d %v", code, ok)
	}
}

// defaultAuthFailures is the failure limit of an App with the default
// --auth-failure-rate.
var defaultAuthFailures = authFailureLimit(DefaultConfig().AuthFailureRate)

// --auth-failure-rate sets the failure limit: 3 a minute refuses the
// fourth made-up key from an address (or the fifth: one may refill while
// the loop runs); -1 refuses none for it.
func TestAuthFailureRateFlag(t *testing.T) {
	for _, c := range []struct {
		rate      int
		limitedBy int // the attempt by which a 429 must have come; 0: never
	}{{3, 5}, {-1, 0}} {
		ta := startApp(t, func(cfg *Config) { cfg.AuthFailureRate = c.rate })
		first429 := 0
		for i := 1; i <= 30 && first429 == 0; i++ {
			switch code, _ := ta.call(t, "GET", "/api/v1/account", "gn_"+randomHex(16), nil, nil); code {
			case http.StatusTooManyRequests:
				first429 = i
			case http.StatusUnauthorized:
			default:
				t.Fatalf("--auth-failure-rate %d, made-up key %d: HTTP %d", c.rate, i, code)
			}
		}
		switch {
		case c.limitedBy == 0 && first429 != 0:
			t.Errorf("--auth-failure-rate -1: a 429 at attempt %d, want none", first429)
		case c.limitedBy != 0 && (first429 == 0 || first429 > c.limitedBy):
			t.Errorf("--auth-failure-rate %d: first 429 at attempt %d, want by attempt %d", c.rate, first429, c.limitedBy)
		}
	}
}
