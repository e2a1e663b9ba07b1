package nodes

import (
	"encoding/json"
	"time"
)

// Candidate is a node that routing may pick, wherever it is connected.
type Candidate struct {
	NodeID    string
	Owner     string // id of the instance that holds the node's socket
	Gen       uint64 // the generation of that connection; the owner refuses any other
	Trust     string
	Labels    map[string]string // the node's; shared, never changed
	FreeSlots int
	CPU       float64
	Session   *Session // the session when the node is connected here, else nil
	Resume    bool     // the node declared wire.FeatureResume

	HasBench    bool    // the node has a benchmark profile
	BenchMs     float64 // its average response time
	BenchFailed bool    // and whether some prompt failed
}

// NodeView is a node as GET /api/v1/nodes shows it.
type NodeView struct {
	NodeID       string          `json:"node_id"`
	Name         string          `json:"name"`
	Capabilities []string        `json:"capabilities"`
	Languages    []string        `json:"languages"`
	ModelInfo    json.RawMessage `json:"model_info"`
	Trust        string          `json:"trust"`
	// Version and Labels are what the node declared at registration (ours;
	// omitted when it declared none).
	Version        string            `json:"version,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	CPUPercent     float64           `json:"cpu_percent"`
	ActiveTasks    int               `json:"active_tasks"`
	MaxConcurrency int               `json:"max_concurrency"`
	// Online and Load are what GemmaNet's client SDK reads into NodeInfo
	// (it defaults them to true and 0.0): every listed node is online
	// (connected to a live instance), and Load is the fraction of its slots
	// in use, active_tasks / max_concurrency, from 0 to 1.
	Online bool    `json:"online"`
	Load   float64 `json:"load"`
	// State is serving, paused, draining or quarantined (by the coordinator;
	// ours); StateReason why, as the pause or drain said or
	// the quarantine wrote.
	State string `json:"state"`
	// AccountID is the node's account: the directory's and operators'
	// (who may pause a node: its own account or the admin), not public.
	AccountID   string    `json:"account_id,omitempty"`
	StateReason string    `json:"state_reason,omitempty"`
	Instance    string    `json:"instance,omitempty"` // the owning instance's id: the directory's and operators', not public
	ConnectedAt time.Time `json:"connected_at"`
}

// Directory is routing's view of the online nodes. The Hub is the
// directory of one instance; a cluster directory adds the nodes other
// instances hold.
type Directory interface {
	// Candidates appends the online nodes with capability to dst.
	Candidates(dst []Candidate, capability string) []Candidate
	// List returns the online nodes, all or those with capability, by node id.
	List(capability string) []NodeView
	// Online counts the online nodes.
	Online() int
	// WaitSlot queues a request that found every node with capability
	// full, until a slot may have freed for it (a slot freed, a node
	// arrived). Remote changes may not wake it; the first waiter of a
	// queue also re-checks on a timer.
	WaitSlot(capability string, p Place) *Waiter
}

var _ Directory = (*Hub)(nil)

// Candidates implements Directory.
func (h *Hub) Candidates(dst []Candidate, capability string) []Candidate {
	for _, s := range h.withCapability(capability) {
		has, ms, failed := s.benchFields()
		dst = append(dst, Candidate{
			NodeID: s.NodeID, Owner: h.cfg.Instance, Gen: s.Gen, Trust: s.Info.Trust, Labels: s.Info.Labels,
			FreeSlots: s.FreeSlots(), CPU: s.CPU(), Session: s, Resume: s.Info.Resume,
			HasBench: has, BenchMs: ms, BenchFailed: failed,
		})
	}
	return dst
}

// List implements Directory.
func (h *Hub) List(capability string) []NodeView {
	var out []NodeView
	for _, s := range h.Sessions() {
		if capability != "" && !contains(s.Info.Capabilities, capability) {
			continue
		}
		out = append(out, s.View(h.cfg.Instance))
	}
	if out == nil {
		out = []NodeView{}
	}
	return out
}

// Online implements Directory.
func (h *Hub) Online() int { return h.Len() }

// View describes the session's node for listings.
func (s *Session) View(instance string) NodeView {
	state, reason := s.State()
	return NodeView{
		State: state, StateReason: reason, AccountID: s.Info.AccountID,
		NodeID: s.NodeID, Name: s.Info.Name, Capabilities: s.Info.Capabilities,
		Languages: s.Info.Languages, ModelInfo: s.Info.ModelInfo, Trust: s.Info.Trust,
		Version: s.Info.Version, Labels: s.Info.Labels,
		CPUPercent: s.CPU(), ActiveTasks: s.InFlight(), MaxConcurrency: s.Info.MaxConcurrency,
		Online: true, Load: load(s.InFlight(), s.Info.MaxConcurrency),
		Instance: instance, ConnectedAt: s.ConnectedAt.UTC(),
	}
}

// load is the fraction of a node's slots in use, from 0 to 1.
func load(active, maxConcurrency int) float64 {
	if maxConcurrency <= 0 {
		return 0
	}
	return min(max(float64(active)/float64(maxConcurrency), 0), 1)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
