package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/ratelimit"
	"github.com/switchyard-dev/switchyard/store"
)

// Cache lifetimes and bounds. A revoked key or deleted account stops working
// on every instance at once when the revocation is broadcast on the auth
// events topic (authevents.go), and otherwise at the key check that follows
// the store's AuthSeq moving (within authPoll and one ListKeys), at most
// authTTL later (while the store answers: see authStaleMax).
const (
	authTTL         = 30 * time.Second
	authNegativeTTL = 5 * time.Second
	// authStaleMax is how long past its expiry a valid key keeps working
	// while the store cannot answer (invariant 14: serve stale rather than
	// fail everyone). A key revoked during an outage works here until the
	// store answers again, at most this long.
	authStaleMax = time.Hour
	// authMaxEntries bounds the positive cache. Only valid keys enter it,
	// so a flood of made-up keys cannot evict them.
	authMaxEntries = 50_000
	// authMaxNegative bounds the cache of unknown keys, kept apart from the
	// valid ones; when full it is cleared, which costs only re-lookups that
	// the per-IP failure limit bounds.
	authMaxNegative = 10_000
	// authMaxBlocked bounds the IPs remembered as over their failure limit.
	authMaxBlocked = 10_000
)

// authFailureLimit is the limit --auth-failure-rate sets: per minute, with
// a burst of as many; -1 (any negative) none.
func authFailureLimit(perMinute int) ratelimit.Limit {
	if perMinute < 0 {
		return ratelimit.Limit{}
	}
	return ratelimit.PerMinute(perMinute)
}

// authCache keeps recent key → account answers so that a request does not
// cost a database read. Keys are held by their SHA-256, never in clear.
type authCache struct {
	st  store.Store
	now func() time.Time // the clock of the cache's expiries and the lockouts; tests set it
	// failLimit is how many failed authentications one client IP may make
	// per minute, cluster-wide (the App's limiter), before its requests
	// with keys the cache does not know get 429 without a store lookup
	// (--auth-failure-rate; a Rate of 0: no limit). It protects the store
	// from floods of made-up keys and slows key guessing.
	failLimit ratelimit.Limit

	mu      sync.Mutex
	pos     map[string]authEntry // valid keys
	neg     map[string]time.Time // unknown keys → until when that is believed
	blocked map[string]time.Time // client IP → until when it gets 429

	lookups atomic.Int64 // Authenticate calls that reached the store
}

type authEntry struct {
	acct    store.Account
	prefix  string // the key's display prefix: how a revocation names it
	expires time.Time
}

func newAuthCache(st store.Store, failLimit ratelimit.Limit) *authCache {
	return &authCache{st: st, now: time.Now, failLimit: failLimit, pos: make(map[string]authEntry), neg: make(map[string]time.Time),
		blocked: make(map[string]time.Time)}
}

func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// errAuthLimited: the client IP made too many failed attempts; no lookup was
// made.
type errAuthLimited struct{ retryAfter time.Duration }

func (e *errAuthLimited) Error() string { return "too many failed authentications from this address" }

// authLimited is the answer to a client address over its failure limit,
// one answer whatever the request carried.
func authLimited(retryAfter time.Duration) *apiError {
	return &apiError{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
		Message:    "too many failed authentications from this address; retry later",
		RetryAfter: strconv.FormatInt(max(int64((retryAfter+time.Second-1)/time.Second), 1), 10)}
}

// lockedOut reports whether ip is over its failure limit at now (as this
// instance last heard from the limiter), and for how long still.
func (c *authCache) lockedOut(ip string, now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	until, ok := c.blocked[ip]
	c.mu.Unlock()
	if !ok || !now.Before(until) {
		return 0, false
	}
	return until.Sub(now), true
}

// authenticate returns the account of a live key, or store.ErrNotFound.
// Other errors mean the store could not answer (nodes map them to 1013).
func (c *authCache) authenticate(ctx context.Context, key string) (store.Account, error) {
	acct, _, err := c.authenticateFrom(ctx, key, "", nil)
	return acct, err
}

// authenticateFrom is authenticate for a client at ip, whose failures are
// counted by lim (nil: not counted). It also returns the key's hash (the
// rate limiter's key), so a request hashes its key once. A valid key
// fresh in the cache never waits for anything; an unknown key from an IP
// over its failure limit gets *errAuthLimited before any store lookup.
func (c *authCache) authenticateFrom(ctx context.Context, key, ip string, lim ratelimit.Limiter) (store.Account, string, error) {
	if key == "" {
		return store.Account{}, "", store.ErrNotFound
	}
	h := keyHash(key)
	now := c.now()
	c.mu.Lock()
	e, known := c.pos[h]
	negUntil, isNeg := c.neg[h]
	blockedUntil := c.blocked[ip]
	c.mu.Unlock()
	if known && now.Before(e.expires) {
		return e.acct, h, nil
	}
	stale := known && now.Sub(e.expires) < authStaleMax
	if isNeg && now.Before(negUntil) {
		return store.Account{}, h, c.failed(ctx, ip, lim, now)
	}
	if lim != nil && now.Before(blockedUntil) {
		if stale {
			return e.acct, h, nil // no lookup, and no reason to refuse a key that was valid
		}
		return store.Account{}, h, &errAuthLimited{retryAfter: blockedUntil.Sub(now)}
	}
	c.lookups.Add(1)
	acct, err := c.st.Authenticate(ctx, key)
	switch {
	case err == nil:
		c.putValid(h, authEntry{acct: acct, prefix: keyPrefix(key), expires: now.Add(authTTL)})
		return acct, h, nil
	case errors.Is(err, store.ErrNotFound):
		c.putUnknown(h, now.Add(authNegativeTTL))
		return store.Account{}, h, c.failed(ctx, ip, lim, now)
	case stale && ctx.Err() == nil:
		// The store cannot answer; a key valid within authStaleMax keeps
		// working rather than failing every client of this instance.
		return e.acct, h, nil
	}
	return store.Account{}, h, err
}

// failed counts a failed authentication from ip and returns
// store.ErrNotFound, or *errAuthLimited once ip is over c.failLimit
// (and remembers that, so that its next unknown keys cost no lookup).
func (c *authCache) failed(ctx context.Context, ip string, lim ratelimit.Limiter, now time.Time) error {
	if lim == nil || ip == "" || c.failLimit.Rate <= 0 {
		return store.ErrNotFound
	}
	res, err := lim.Allow(ctx, "auth_failures:"+ip, c.failLimit)
	if err != nil || res.Allowed {
		// A limiter that cannot answer (Redis down) does not turn a 401
		// into anything else; the store's breaker still bounds lookups.
		return store.ErrNotFound
	}
	c.mu.Lock()
	if len(c.blocked) >= authMaxBlocked {
		for k, until := range c.blocked {
			if !now.Before(until) {
				delete(c.blocked, k)
			}
		}
	}
	if len(c.blocked) < authMaxBlocked {
		c.blocked[ip] = now.Add(res.RetryAfter)
	}
	c.mu.Unlock()
	return &errAuthLimited{retryAfter: res.RetryAfter}
}

func (c *authCache) putValid(h string, e authEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.neg, h)
	if _, ok := c.pos[h]; !ok && len(c.pos) >= authMaxEntries {
		// Only valid keys get here, so this is rare: drop entries no longer
		// usable even stale, then expired ones, then any one.
		now := time.Now()
		for k, old := range c.pos {
			if now.Sub(old.expires) >= authStaleMax {
				delete(c.pos, k)
			}
		}
		for k, old := range c.pos {
			if len(c.pos) < authMaxEntries {
				break
			}
			if now.After(old.expires) {
				delete(c.pos, k)
			}
		}
		for k := range c.pos {
			if len(c.pos) < authMaxEntries {
				break
			}
			delete(c.pos, k)
		}
	}
	c.pos[h] = e
}

func (c *authCache) putUnknown(h string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pos, h) // revoked, or its account deleted
	if len(c.neg) >= authMaxNegative {
		clear(c.neg)
	}
	c.neg[h] = until
}

// forgetAccount drops an account's cached keys (it was deleted here).
func (c *authCache) forgetAccount(accountID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, e := range c.pos {
		if e.acct.ID == accountID {
			delete(c.pos, h)
		}
	}
}

// forgetKey drops the cached entry of an account's key named by its prefix
// (it was revoked): the next use asks the store, which says 401.
func (c *authCache) forgetKey(accountID, prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, e := range c.pos {
		if e.acct.ID == accountID && e.prefix == prefix {
			delete(c.pos, h)
		}
	}
}

// retainLive drops the cached keys, cached before since, that are not in
// live (account id + "/" + prefix): revoked, or their account deleted,
// with nobody telling this instance. Entries cached after since may be of
// keys created after live was read, and are kept.
func (c *authCache) retainLive(live map[string]bool, since time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, e := range c.pos {
		if e.expires.Add(-authTTL).Before(since) && !live[e.acct.ID+"/"+e.prefix] {
			delete(c.pos, h)
		}
	}
}

// updateLimits gives the cached keys their limits as listed (by key id).
func (c *authCache) updateLimits(limits map[string]store.KeyLimits) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, e := range c.pos {
		if l, ok := limits[e.acct.KeyID]; ok && !l.Equal(e.acct.KeyLimits) {
			e.acct.KeyLimits = l
			c.pos[h] = e
		}
	}
}

// len is the number of valid keys cached.
func (c *authCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pos)
}

// keyPrefix is a key's display prefix as the store keeps it (store.APIKey.Prefix).
func keyPrefix(key string) string {
	if len(key) > keyPrefixLen {
		return key[:keyPrefixLen]
	}
	return key
}

// keyPrefixLen is the length of store.APIKey.Prefix: "gn_" and 8 hex digits.
const keyPrefixLen = 11

// Context keys set by the auth middleware.
const (
	ctxAccount = "switchyard.account"
	ctxKeyHash = "switchyard.key_hash"
)

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// requireAccount authenticates the Bearer key (or, on the task routes, the
// deprecated body field keyFromBody found), refuses it where the route's
// key scope does not let it in (scope.go), and stores the account in the
// context.
func (a *App) requireAccount(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key := bearer(c.Request())
		if key == "" {
			key, _ = c.Get(ctxBodyKey).(string)
		}
		acct, hash, err := a.auth.authenticateFrom(c.Request().Context(), key, c.RealIP(), a.limiter)
		var limited *errAuthLimited
		switch {
		case errors.Is(err, store.ErrNotFound):
			return newError(http.StatusUnauthorized, CodeInvalidAPIKey, "Invalid or missing API key")
		case errors.As(err, &limited):
			return authLimited(limited.retryAfter)
		case err != nil:
			return a.storeUnavailable("cannot check an API key", err)
		}
		if err := checkScope(c, acct.KeyLimits); err != nil {
			return err
		}
		c.Set(ctxAccount, acct)
		c.Set(ctxKeyHash, hash)
		return next(c)
	}
}

// storeUnavailable logs why the store failed (the details are for
// operators: they may name hosts, databases and users) and returns the
// public answer, which names only what failed.
func (a *App) storeUnavailable(what string, err error) *apiError {
	if errors.Is(err, store.ErrUnavailable) {
		// The Guard logged the episode when its breaker opened; one line
		// per request would flood the log at request rate.
		a.log.Debug(what+": the store is unavailable", "err", err)
	} else {
		a.log.Warn(what+": the store is unavailable", "err", err)
	}
	return &apiError{Status: http.StatusServiceUnavailable, Code: CodeStoreUnavailable,
		Message: "the store is unavailable; retry shortly", RetryAfter: "1"}
}

func accountOf(c echo.Context) store.Account {
	acct, _ := c.Get(ctxAccount).(store.Account)
	return acct
}
