package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/store"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Revocations reach every instance within a second (invariant
// 15), from the database itself: RevokeKey and DeleteAccount raise the
// store's AuthSeq in their transactions, and each instance reads it every
// authPoll while it has nodes connected or keys cached; when it changed,
// the instance checks the keys in use (checkKeysOnce) and closes the nodes
// of those gone (4001, or 4003 for a deleted account) and forgets them in
// its cache. So a revocation made anywhere — another instance, the CLI
// with only --database-url — acts everywhere, with or without Redis.
// Faster still, whoever revokes broadcasts an AuthEvent on the control
// channel's TopicAuth, which every instance follows and acts on at once.

// TopicAuth carries AuthEvents on the control channel.
const TopicAuth bus.Topic = "auth"

// AuthEventKind says what an AuthEvent announces.
type AuthEventKind string

// The auth events.
const (
	AuthKeyRevoked     AuthEventKind = "key_revoked"     // one key of an account no longer works
	AuthAccountDeleted AuthEventKind = "account_deleted" // the account and all its keys are gone
)

// AuthEvent is one message on TopicAuth (JSON).
type AuthEvent struct {
	Kind      AuthEventKind `json:"kind"`
	AccountID string        `json:"account_id"`
	// KeyPrefix is the revoked key's display prefix (store.APIKey.Prefix);
	// key_revoked only.
	KeyPrefix string `json:"key_prefix,omitempty"`
}

// PublishAuthEvent tells every instance that follows control about ev. It
// returns how many instances heard it.
func PublishAuthEvent(ctx context.Context, control bus.Control, ev AuthEvent) (int, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return 0, err
	}
	return control.Broadcast(ctx, TopicAuth, b)
}

// How often the keys in use are checked. authPoll reads AuthSeq (one row);
// a key check (ListKeys, every key) follows only when it changed, and
// every keyCheckBackstop whatever it says (a key revoked by hand in SQL,
// without AuthSeq). Neither runs while no node is connected and no key is
// cached here: idle costs nothing (invariant 12).
const (
	authPoll         = 250 * time.Millisecond
	keyCheckBackstop = 30 * time.Second
)

// applyAuthEvent acts on an event from the channel.
func (a *App) applyAuthEvent(ev AuthEvent) {
	switch ev.Kind {
	case AuthKeyRevoked:
		a.auth.forgetKey(ev.AccountID, ev.KeyPrefix)
		if n := a.hub.CloseKey(ev.AccountID, ev.KeyPrefix); n > 0 {
			a.log.Info("closed the nodes of a revoked key", "account_id", ev.AccountID, "key_prefix", ev.KeyPrefix, "nodes_closed", n)
		}
	case AuthAccountDeleted:
		a.auth.forgetAccount(ev.AccountID)
		if n := a.hub.CloseAccount(ev.AccountID); n > 0 {
			a.log.Info("closed the nodes of a deleted account", "account_id", ev.AccountID, "nodes_closed", n)
		}
	default:
		a.log.Warn("ignoring an unknown auth event", "kind", ev.Kind)
	}
}

// publishAuth tells every instance about ev, this one included (it has
// acted already; acting again finds nothing left to do).
func (a *App) publishAuth(ev AuthEvent) {
	ctx, cancel := context.WithTimeout(a.root, 2*time.Second)
	defer cancel()
	if _, err := PublishAuthEvent(ctx, a.control, ev); err != nil {
		a.log.Warn("cannot publish an auth event; other instances act on it when they see the store's auth sequence move",
			"kind", ev.Kind, "account_id", ev.AccountID, "err", err)
	}
}

// watchAuthEvents applies the auth events until ctx ends. A subscription
// confirmed again after Redis was away asks for a key check at once: an
// event may have been missed meanwhile.
func (a *App) watchAuthEvents(ctx context.Context) {
	err := a.control.Follow(ctx, TopicAuth, func(p []byte) {
		var ev AuthEvent
		err := wire.CheckBounds(p) // what the bus carries is bounded as a client's body is (invariant 16)
		if err == nil {
			err = json.Unmarshal(p, &ev)
		}
		if err != nil {
			a.log.Warn("dropping a malformed auth event", "err", err)
			return
		}
		a.applyAuthEvent(ev)
	}, a.checkKeysNow)
	if err != nil && ctx.Err() == nil {
		a.log.Warn("stopped following the auth events; revocations reach this instance at its key checks", "err", err)
	}
}

func (a *App) checkKeysNow() {
	select {
	case a.keyCheck <- struct{}{}:
	default:
	}
}

// checkKeys checks the keys in use when the store's AuthSeq moves, when
// asked (a resubscription to the auth events: one may have been missed),
// and every keyCheckBackstop, until ctx ends.
func (a *App) checkKeys(ctx context.Context) {
	poll, backstop := time.NewTicker(authPoll), time.NewTicker(keyCheckBackstop)
	defer poll.Stop()
	defer backstop.Stop()
	seen := int64(-1) // the AuthSeq of the last check that succeeded; -1: none yet
	for {
		seq := seen
		select {
		case <-ctx.Done():
			return
		case <-backstop.C:
		case <-a.keyCheck:
		case <-poll.C:
			if !a.keysInUse() {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, authPoll*4)
			n, err := a.store.AuthSeq(pctx)
			cancel()
			if err != nil {
				a.log.Debug("cannot read the store's auth sequence; retrying", "err", err)
				continue
			}
			if n == seen {
				continue
			}
			seq = n // read before the keys: a revocation after it moves it again
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := a.checkKeysOnce(cctx)
		cancel()
		switch {
		case err == nil:
			seen = seq
		case ctx.Err() == nil:
			a.log.Debug("cannot check the keys in use; retrying later", "err", err)
		}
	}
}

// keysInUse reports whether anything here depends on a key: a node
// connected with one, or a key in the cache.
func (a *App) keysInUse() bool { return a.hub.Len() > 0 || a.auth.len() > 0 }

// checkKeysOnce reads the live keys (one query) and acts on the sessions
// and cache entries whose key is not among them. Only those that existed
// before the read are judged: a key created since is not in it.
func (a *App) checkKeysOnce(ctx context.Context) error {
	if !a.keysInUse() {
		return nil // idle costs nothing (invariant 12)
	}
	sessions := a.hub.Sessions()
	since := time.Now()
	keys, err := a.store.ListKeys(ctx, "")
	if err != nil {
		return err
	}
	live, listed := map[string]bool{}, map[string]bool{}
	limits := map[string]store.KeyLimits{}
	for _, k := range keys {
		listed[k.AccountID] = true // keys of deleted accounts are never listed
		if k.RevokedAt == nil {
			live[k.AccountID+"/"+k.Prefix] = true
			limits[k.ID] = k.Limits
		}
	}
	for _, s := range sessions {
		id, prefix := s.Info.AccountID, s.Info.KeyPrefix
		if prefix == "" || !s.ConnectedAt.Before(since) || live[id+"/"+prefix] {
			continue
		}
		if !listed[id] {
			if _, err := a.store.Account(ctx, id); errors.Is(err, store.ErrNotFound) {
				a.applyAuthEvent(AuthEvent{Kind: AuthAccountDeleted, AccountID: id})
				continue
			} else if err != nil {
				return fmt.Errorf("account %s: %w", id, err)
			}
		}
		a.applyAuthEvent(AuthEvent{Kind: AuthKeyRevoked, AccountID: id, KeyPrefix: prefix})
	}
	a.auth.retainLive(live, since)
	a.auth.updateLimits(limits) // switchyard keys set-limits raises the sequence too
	return nil
}
