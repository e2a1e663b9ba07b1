package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"switchyard/store"
)

// Cache lifetimes. A revoked key or deleted account stops working here at
// once, and on other instances within authTTL.
const (
	authTTL         = 30 * time.Second
	authNegativeTTL = 5 * time.Second
	authMaxEntries  = 50_000
)

// authCache keeps recent key → account answers so that a request does not
// cost a database read. Keys are held by their SHA-256, never in clear.
type authCache struct {
	st store.Store
	mu sync.Mutex
	m  map[string]authEntry
}

type authEntry struct {
	acct    store.Account
	err     error // store.ErrNotFound for a cached miss
	expires time.Time
}

func newAuthCache(st store.Store) *authCache {
	return &authCache{st: st, m: make(map[string]authEntry)}
}

func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// authenticate returns the account of a live key, or store.ErrNotFound.
// Other errors mean the store could not answer.
func (c *authCache) authenticate(ctx context.Context, key string) (store.Account, error) {
	acct, _, err := c.authenticateHash(ctx, key)
	return acct, err
}

// authenticateHash is authenticate that also returns the key's hash (the
// rate limiter's key), so a request hashes its key once.
func (c *authCache) authenticateHash(ctx context.Context, key string) (store.Account, string, error) {
	if key == "" {
		return store.Account{}, "", store.ErrNotFound
	}
	h := keyHash(key)
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[h]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.acct, h, e.err
	}
	acct, err := c.st.Authenticate(ctx, key)
	switch {
	case err == nil:
		c.put(h, authEntry{acct: acct, expires: now.Add(authTTL)})
	case errors.Is(err, store.ErrNotFound):
		c.put(h, authEntry{err: store.ErrNotFound, expires: now.Add(authNegativeTTL)})
	}
	return acct, h, err
}

func (c *authCache) put(h string, e authEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= authMaxEntries {
		clear(c.m) // crude, and rare: only a flood of distinct keys gets here
	}
	c.m[h] = e
}

// forgetAccount drops an account's cached keys (it was deleted here).
func (c *authCache) forgetAccount(accountID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, e := range c.m {
		if e.acct.ID == accountID {
			delete(c.m, h)
		}
	}
}

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

// requireAccount authenticates the Bearer key (or, on /api/v1/request, the
// deprecated body field a previous middleware found) and stores the
// account in the context.
func (a *App) requireAccount(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key := bearer(c.Request())
		if key == "" {
			if b, ok := c.Get(ctxTaskBody).(*taskBody); ok {
				key = b.APIKey
			}
		}
		acct, hash, err := a.auth.authenticateHash(c.Request().Context(), key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return newError(http.StatusUnauthorized, "invalid_api_key", "Invalid or missing API key")
		case err != nil:
			a.log.Warn("cannot check API key", "err", err)
			return &apiError{Status: http.StatusServiceUnavailable, Code: "store_unavailable",
				Message: "cannot check API keys right now; retry shortly", RetryAfter: "1"}
		}
		c.Set(ctxAccount, acct)
		c.Set(ctxKeyHash, hash)
		return next(c)
	}
}

func accountOf(c echo.Context) store.Account {
	acct, _ := c.Get(ctxAccount).(store.Account)
	return acct
}
