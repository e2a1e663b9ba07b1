package store

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Sentinel errors. Callers test them with errors.Is; implementations wrap them
// with a short prefix.
var (
	ErrNotFound  = errors.New("not found")
	ErrForbidden = errors.New("forbidden") // rating a task of another account
	ErrConflict  = errors.New("conflict")  // rating a task twice, or a duplicate name
	ErrExpired   = errors.New("expired")   // rating a task older than the rating window
	ErrInvalid   = errors.New("invalid")   // a value out of range (rating not 1-5, unknown trust tier)
)

// Trust tiers of an account. Nodes inherit the tier of their account.
const (
	TrustCommunity = "community"
	TrustOfficial  = "official"
)

// Task statuses in a TaskRecord.
const (
	StatusCompleted = "completed" // the node returned a result with status completed
	StatusFailed    = "failed"    // the node returned a result with any other status
	StatusError     = "error"     // no result: see ErrorCode (timeout, node_disconnected, ...)
	StatusCanceled  = "canceled"  // the client went away first
)

// RatingWindow is how long after it finished a task can be rated (GemmaNet: 1 h).
const RatingWindow = time.Hour

// Account owns API keys and nodes.
type Account struct {
	ID        string    `json:"account_id"`
	Name      string    `json:"name"`
	Email     string    `json:"email,omitempty"`
	Trust     string    `json:"trust"`
	CreatedAt time.Time `json:"created_at"`
	// KeyID is the key Authenticate matched (its usage is metered under
	// it), KeyLimits that key's limits; empty from every other call.
	KeyID     string    `json:"-"`
	KeyLimits KeyLimits `json:"-"`
}

// KeyLimits are what a key may spend; 0 means no limit. Tokens are the
// prompt and completion tokens the nodes report; a budget is in the
// operator's spend units, a task's tokens priced by its task type; both are
// counted per UTC day and per UTC calendar month.
type KeyLimits struct {
	TokensPerDay   int64 `json:"tokens_per_day"`
	TokensPerMonth int64 `json:"tokens_per_month"`
	BudgetPerDay   int64 `json:"budget_per_day"`
	BudgetPerMonth int64 `json:"budget_per_month"`
	// Use is what the key may do: KeyUseAny, KeyUseNode (connect nodes
	// only) or KeyUseClient (send requests only). A key with a use or
	// task types is scoped: it manages nothing of its account (Unrestricted).
	Use string `json:"use"`
	// TaskTypes are the task types the key may ask for, or serve as a
	// node; empty: any.
	TaskTypes []string `json:"task_types"`
}

// Uses of a key (KeyLimits.Use).
const (
	KeyUseAny    = ""
	KeyUseNode   = "node"
	KeyUseClient = "client"
)

// Any reports whether any spending limit is set (Use and TaskTypes are
// checked apart).
func (l KeyLimits) Any() bool {
	return l.TokensPerDay > 0 || l.TokensPerMonth > 0 || l.BudgetPerDay > 0 || l.BudgetPerMonth > 0
}

// Equal reports whether l and o are the same limits.
func (l KeyLimits) Equal(o KeyLimits) bool {
	return l.TokensPerDay == o.TokensPerDay && l.TokensPerMonth == o.TokensPerMonth && l.BudgetPerDay == o.BudgetPerDay &&
		l.BudgetPerMonth == o.BudgetPerMonth && l.Use == o.Use && slices.Equal(l.TaskTypes, o.TaskTypes)
}

// AllowsType reports whether the key may ask for (or serve) taskType.
func (l KeyLimits) AllowsType(taskType string) bool {
	return len(l.TaskTypes) == 0 || slices.Contains(l.TaskTypes, taskType)
}

// MayRequest reports whether the key may send requests and read its
// tasks: any key but a node-only one.
func (l KeyLimits) MayRequest() bool { return l.Use != KeyUseNode }

// MayServe reports whether the key may connect nodes: any key but a
// client-only one.
func (l KeyLimits) MayServe() bool { return l.Use != KeyUseClient }

// Unrestricted reports whether the key may manage its account (delete it,
// rotate its webhook secret, control its nodes) and read what every key of
// the account did: a key with neither a use nor task types. A spending
// limit does not restrict this: it bounds what the key spends, not what it
// may do.
func (l KeyLimits) Unrestricted() bool { return l.Use == KeyUseAny && len(l.TaskTypes) == 0 }

// APIKey is the stored view of a key; the key itself is only ever returned
// once, by CreateAccount or CreateKey, and is stored as its SHA-256.
type APIKey struct {
	ID        string     `json:"key_id"`
	AccountID string     `json:"account_id"`
	Prefix    string     `json:"prefix"` // the first 11 characters ("gn_" + 8 hex), enough to recognise it
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Limits    KeyLimits  `json:"limits"`
}

// Usage is the token usage a node reported.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// TaskRecord is what is kept of a finished task.
type TaskRecord struct {
	ID        string   `json:"task_id"`
	AccountID string   `json:"account_id"`
	KeyID     string   `json:"key_id,omitempty"` // the API key that asked for it ("" when unknown)
	TaskType  string   `json:"task_type"`
	Stream    bool     `json:"stream"`
	Status    string   `json:"status"`               // one of the Status constants
	ErrorCode string   `json:"error_code,omitempty"` // set when Status is StatusError
	NodeIDs   []string `json:"node_ids"`             // every node that served it (rating applies to each)
	Requester string   `json:"requester_instance"`   // instance id where the request landed
	Owner     string   `json:"owner_instance"`       // instance id that held the node's socket ("" if never assigned)
	Attempts  int      `json:"attempts"`
	// Retries are the attempts that failed for their node's sake and were
	// run again elsewhere, in order; nil for a task run once.
	Retries      []Retry   `json:"retries,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	AssignedAt   time.Time `json:"assigned_at"` // zero if never handed to a node
	FinishedAt   time.Time `json:"finished_at"`
	ProcessingMs int64     `json:"processing_time_ms"` // as reported by the node
	ContentBytes int64     `json:"content_bytes"`
	ResultBytes  int64     `json:"result_bytes"`
	Usage        Usage     `json:"usage"`
}

// Retry is one attempt of a task that failed for its node's sake and was
// run again on another node.
type Retry struct {
	NodeID string `json:"node_id"`
	// Reason is why: node_disconnected (its socket closed or its heartbeat
	// lapsed), instance_gone (the instance holding it died) or
	// node_unavailable (it answered status "unavailable").
	Reason string `json:"reason"`
	// LostMs is how long the failed attempt held the task, from its
	// hand-over to its failure.
	LostMs int64 `json:"lost_ms"`
	// ResumedBytes, for a stream that had delivered text, is how much: the
	// next node continued after it (0: the task started over).
	ResumedBytes int64 `json:"resumed_bytes,omitempty"`
}

// Outcome is one node's part in a finished task, fed into its reputation.
type Outcome struct {
	NodeID    string    `json:"node_id"`
	Success   bool      `json:"success"`
	ElapsedMs int64     `json:"elapsed_ms"` // a timeout counts as a failure of 60,000 ms
	At        time.Time `json:"at"`
	// Account is the requesting account. A failure counts toward the
	// node's suspension only together with failures from other accounts
	// (ReputationConfig.SuspendMinAccounts), so that no single account can
	// get another's node suspended. "" is one anonymous requester. Not
	// stored: the database keeps counters, not who caused them (only an
	// outcome it refused keeps it, in dead_letters).
	Account string `json:"account_id,omitempty"`
}

// NodeStats are the counters reputation is computed from.
type NodeStats struct {
	NodeID          string     `json:"node_id"`
	AccountID       string     `json:"account_id,omitempty"`
	Name            string     `json:"name,omitempty"`
	TotalTasks      int64      `json:"total_tasks"`
	SuccessfulTasks int64      `json:"successful_tasks"`
	TotalMs         int64      `json:"total_response_ms"`
	LastTaskAt      *time.Time `json:"last_task_at,omitempty"`
	RatingSum       int64      `json:"rating_sum"`
	RatingCount     int64      `json:"rating_count"`
	SuspendedUntil  *time.Time `json:"suspended_until,omitempty"`
}

// Store is the persistence of switchyard. One implementation keeps it in
// SQLite (the embedded default) or PostgreSQL, and one behavioural suite
// (storetest) runs against both. Every method is safe for concurrent use.
//
// Times come back in UTC to the microsecond (PostgreSQL's precision), in
// both dialects alike.
type Store interface {
	// CreateAccount creates an account with its first API key and returns the
	// key in plain text (the only time it is ever visible). trust "" means
	// TrustCommunity; anything but the two tiers is ErrInvalid, and so is an
	// empty name or a name or email holding a NUL byte or invalid UTF-8.
	CreateAccount(ctx context.Context, name, email, trust string) (Account, string, error)
	// Account returns a live account; ErrNotFound if unknown or deleted.
	Account(ctx context.Context, id string) (Account, error)
	// AccountByName finds an account by its name (names are unique; ErrConflict on create).
	AccountByName(ctx context.Context, name string) (Account, error)
	// DeleteAccount deletes the account and revokes its keys; ErrNotFound if
	// it is unknown or deleted already. The row is kept for the tasks and
	// ratings that name it, but every read treats it as absent, its name can
	// be taken again, and its nodes leave AllNodeStats.
	DeleteAccount(ctx context.Context, id string) error

	// CreateKey adds a key to an account and returns it in plain text once;
	// ErrNotFound for an unknown or deleted account.
	CreateKey(ctx context.Context, accountID string) (APIKey, string, error)
	// ListKeys lists the keys of one account, or of all when accountID is "",
	// revoked ones included, oldest first. ErrNotFound for an unknown or
	// deleted account; keys of deleted accounts are never listed.
	ListKeys(ctx context.Context, accountID string) ([]APIKey, error)
	// RevokeKey revokes a key by its ID or its prefix (or the whole key).
	// ErrNotFound if nothing matches, ErrConflict if a prefix matches several
	// keys, ErrInvalid for "". Revoking a revoked key changes nothing.
	RevokeKey(ctx context.Context, idOrPrefix string) error
	// SetKeyLimits replaces a key's limits (by id or prefix, as RevokeKey)
	// and returns the key. ErrInvalid for a negative limit. It raises
	// AuthSeq, so that instances pick the limits up at once.
	SetKeyLimits(ctx context.Context, idOrPrefix string, l KeyLimits) (APIKey, error)
	// Authenticate returns the account that owns a live key; ErrNotFound
	// for an unknown or revoked key, or a deleted account.
	Authenticate(ctx context.Context, key string) (Account, error)
	// AuthSeq is a number that grows whenever a key stops working: RevokeKey
	// and DeleteAccount raise it in their transactions. An instance that
	// sees it change checks the keys in use there (one row: cheap to poll).
	AuthSeq(ctx context.Context) (int64, error)

	// WriteTasks stores finished tasks (in one transaction; a batch from the
	// writer). Writing the same ID twice keeps the first. A record without an
	// ID fails the batch with ErrInvalid. NUL bytes are removed from strings
	// and invalid UTF-8 replaced, as PostgreSQL cannot store them.
	WriteTasks(ctx context.Context, recs []TaskRecord) error
	// WriteUsage stores what nodes reported for the tasks they ran (in one
	// transaction; a batch from the writer). Writing the same task and
	// node twice keeps the first. A report without a task or node ID fails
	// the batch with ErrInvalid; strings are cleaned as WriteTasks does.
	WriteUsage(ctx context.Context, reps []UsageReport) error
	// Usage returns a row per account, UTC day, key and task type
	// (usage.go): requests, completed and content_bytes of the tasks stored
	// by WriteTasks, tokens, node_ms and result_bytes of the reports stored
	// by WriteUsage. Each is counted once, in the same transaction that
	// stores it.
	Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error)
	// WriteDeadLetters keeps records the Writer set aside because the
	// store refused them (deadletters.go), each field cut to its bound so
	// that a dead letter is never refused itself, and deletes the oldest
	// beyond DeadLettersKept, in one transaction.
	WriteDeadLetters(ctx context.Context, dls []DeadLetter) error
	// DeadLetters returns the newest dead letters, at most limit (1 or
	// more, else ErrInvalid), newest first, and how many the table holds.
	DeadLetters(ctx context.Context, limit int) ([]DeadLetter, int64, error)
	// Task returns a stored task (NodeIDs never nil); ErrNotFound if unknown.
	Task(ctx context.Context, id string) (TaskRecord, error)
	// CountCompletedSince counts tasks with status completed finished at or after t.
	CountCompletedSince(ctx context.Context, t time.Time) (int64, error)

	// RecordNode remembers a node's account and name (upsert) so that the
	// leaderboard can name it and DeleteAccount can find it. Counters are
	// kept. ErrInvalid for an empty node id.
	RecordNode(ctx context.Context, nodeID, accountID, name string) error
	// ApplyOutcomes adds finished tasks to their nodes' counters (one
	// transaction), creating nodes it has not seen. LastTaskAt only moves
	// forward; an outcome with a zero At leaves it alone. ErrInvalid for an
	// outcome without a node id. Not idempotent: each call counts.
	ApplyOutcomes(ctx context.Context, outs []Outcome) error
	// NodeStats returns the counters of the given nodes; unknown nodes are absent.
	NodeStats(ctx context.Context, nodeIDs []string) (map[string]NodeStats, error)
	// AllNodeStats returns the counters of every known node (the leaderboard
	// ranks them), ordered by node id, without the nodes of deleted accounts.
	AllNodeStats(ctx context.Context) ([]NodeStats, error)
	// Suspend marks a node suspended until the given time (replacing any
	// earlier time), creating the node if needed. ErrInvalid for "".
	Suspend(ctx context.Context, nodeID string, until time.Time) error

	// Rate rates a finished task for every node that served it and returns
	// those nodes (sorted, each once). ErrInvalid if rating is not 1-5 (checked
	// first), ErrNotFound if the task is unknown or no node served it,
	// ErrForbidden if accountID did not request it, ErrExpired past
	// RatingWindow after it finished, ErrConflict if it was rated already.
	// A task can be rated whatever its status, if a node served it.
	Rate(ctx context.Context, taskID, accountID string, rating int, now time.Time) ([]string, error)

	// SaveBenchmark stores a node's latest benchmark profile (JSON), replacing
	// the one before.
	SaveBenchmark(ctx context.Context, nodeID string, profile []byte, at time.Time) error
	// Benchmark returns a node's latest profile and when it was measured;
	// ErrNotFound when it has none.
	Benchmark(ctx context.Context, nodeID string) ([]byte, time.Time, error)

	// AsyncQueue is the durable queue of async tasks (async.go).
	AsyncQueue
	// Webhooks returns the webhook outbox and the accounts' signing
	// secrets (webhooks.go), kept in the same database.
	Webhooks() WebhookStore

	// Ping checks the database is reachable (readiness).
	Ping(ctx context.Context) error
	Close() error
}
