package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/store"
)

// Revocations reach every instance at once (DESIGN §5, invariant 15): who
// revokes a key or deletes an account (an instance serving DELETE
// /api/v1/account, or the CLI writing to the store directly) broadcasts an
// AuthEvent on the control channel's TopicAuth; every instance follows it,
// closes the nodes that used the key (4001) or the account (4003), and
// forgets the key in its cache. A slow backstop (checkKeys) catches what
// was missed: an event broadcast while an instance was away from Redis, a
// CLI run without --redis-url, or an instance with no Redis at all (then
// it is the only way, and runs every keyCheckInterval).

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

// Key check intervals: with Redis the events do the work and the check is
// a backstop; without Redis it is the only way an instance learns of a
// revocation made by the CLI. Each check is one store query (ListKeys),
// made only while nodes are connected or keys are cached here.
const (
	keyCheckInterval = time.Second
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
		a.log.Warn("cannot publish an auth event; other instances act on it at their next key check",
			"kind", ev.Kind, "account_id", ev.AccountID, "err", err)
	}
}

// watchAuthEvents applies the auth events until ctx ends. A subscription
// confirmed again after Redis was away asks for a key check at once: an
// event may have been missed meanwhile.
func (a *App) watchAuthEvents(ctx context.Context) {
	err := a.control.Follow(ctx, TopicAuth, func(p []byte) {
		var ev AuthEvent
		if err := json.Unmarshal(p, &ev); err != nil {
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

// checkKeys is the backstop: it closes the nodes, and forgets the cached
// entries, of keys no longer live, every keyCheckInterval without Redis or
// keyCheckBackstop with it (and at once after a resubscription).
func (a *App) checkKeys(ctx context.Context) {
	every := keyCheckInterval
	if a.cluster != nil {
		every = keyCheckBackstop
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.keyCheck:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := a.checkKeysOnce(cctx); err != nil && ctx.Err() == nil {
			a.log.Debug("cannot check the keys in use; retrying later", "err", err)
		}
		cancel()
	}
}

// checkKeysOnce reads the live keys (one query) and acts on the sessions
// and cache entries whose key is not among them. Only those that existed
// before the read are judged: a key created since is not in it.
func (a *App) checkKeysOnce(ctx context.Context) error {
	sessions := a.hub.Sessions()
	if len(sessions) == 0 && a.auth.len() == 0 {
		return nil // idle costs nothing (invariant 12)
	}
	since := time.Now()
	keys, err := a.store.ListKeys(ctx, "")
	if err != nil {
		return err
	}
	live, listed := map[string]bool{}, map[string]bool{}
	for _, k := range keys {
		listed[k.AccountID] = true // keys of deleted accounts are never listed
		if k.RevokedAt == nil {
			live[k.AccountID+"/"+k.Prefix] = true
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
	return nil
}
