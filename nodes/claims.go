package nodes

import (
	"context"
	"errors"
	"sync"
)

// ErrTooManyNodes is returned by Claim when the account already has its
// cap of nodes online.
var ErrTooManyNodes = errors.New("too many nodes for this account")

// Claim is the result of taking ownership of a node identity.
type Claim struct {
	Gen       uint64 // the fencing generation of this connection
	PrevOwner string // the instance that held the previous connection, "" if none
	PrevGen   uint64
}

// Claims decides which connection owns a node identity, cluster-wide
// (invariant 1): a claim takes the next generation and replaces
// any earlier holder; the per-account cap counts node ids, so a reconnect
// under the same id does not count twice. Memory implements it for one
// instance; the Redis implementation fences with a Lua compare-and-set.
type Claims interface {
	// Claim makes instance the owner of nodeID for accountID, unless that
	// would put the account over limit distinct nodes (ErrTooManyNodes).
	Claim(ctx context.Context, instance, nodeID, accountID string, limit int) (Claim, error)
	// Release gives up the claim if instance still holds it at gen; a newer
	// claim is left alone.
	Release(ctx context.Context, instance string, h Held) error
	// Refresh keeps instance's claims alive and returns those it no longer
	// holds: a newer connection took them, and their sockets are stale.
	Refresh(ctx context.Context, instance string, held []Held) (lost []Held, err error)
}

// Held is a claim an instance holds.
type Held struct {
	NodeID    string
	AccountID string
	Gen       uint64
}

// MemoryClaims is Claims for a single instance.
type MemoryClaims struct {
	mu       sync.Mutex
	gens     map[string]uint64            // node id → last generation handed out
	holders  map[string]memHolder         // node id → current holder
	accounts map[string]map[string]uint64 // account → node id → gen, the nodes counted against its cap
}

type memHolder struct {
	instance string
	gen      uint64
}

var _ Claims = (*MemoryClaims)(nil)

// NewMemoryClaims returns an empty claim table.
func NewMemoryClaims() *MemoryClaims {
	return &MemoryClaims{
		gens:     make(map[string]uint64),
		holders:  make(map[string]memHolder),
		accounts: make(map[string]map[string]uint64),
	}
}

// Claim implements Claims.
func (m *MemoryClaims) Claim(_ context.Context, instance, nodeID, accountID string, limit int) (Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	nodes := m.accounts[accountID]
	if _, held := nodes[nodeID]; !held && limit > 0 && len(nodes) >= limit {
		return Claim{}, ErrTooManyNodes
	}
	if nodes == nil {
		nodes = make(map[string]uint64)
		m.accounts[accountID] = nodes
	}
	gen := m.gens[nodeID] + 1
	m.gens[nodeID] = gen
	prev := m.holders[nodeID]
	m.holders[nodeID] = memHolder{instance: instance, gen: gen}
	nodes[nodeID] = gen
	return Claim{Gen: gen, PrevOwner: prev.instance, PrevGen: prev.gen}, nil
}

// Release implements Claims.
func (m *MemoryClaims) Release(_ context.Context, instance string, h Held) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.holders[h.NodeID]; ok && cur.gen == h.Gen && cur.instance == instance {
		delete(m.holders, h.NodeID)
	}
	if nodes := m.accounts[h.AccountID]; nodes[h.NodeID] == h.Gen {
		delete(nodes, h.NodeID)
		if len(nodes) == 0 {
			delete(m.accounts, h.AccountID)
		}
	}
	return nil
}

// Refresh implements Claims: in memory nothing expires, so only a newer
// claim makes one lost.
func (m *MemoryClaims) Refresh(_ context.Context, instance string, held []Held) ([]Held, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var lost []Held
	for _, h := range held {
		if cur := m.holders[h.NodeID]; cur.instance != instance || cur.gen != h.Gen {
			lost = append(lost, h)
		}
	}
	return lost, nil
}
