package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/url"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Handler serves one task. It returns the full result text (also when it
// streamed: the agent does not accumulate chunks). A returned error makes the
// task fail with the error's text as its result.
//
// emit sends one chunk to the client when the task asked for streaming; when
// it did not, emit does nothing and returns nil, so a handler can call it
// either way. emit returns an error once the task is cancelled or the
// connection is gone; the handler should then return.
//
// ctx is cancelled when the server cancels the task (task_cancel), when the
// connection drops and when the node stops. A task whose ctx was cancelled
// sends no task_result, whatever the handler returns: the server has already
// given up on it (and GemmaNet's server ignores late results anyway).
//
// Handlers run concurrently, at most NodeConfig.MaxConcurrency at once.
type Handler interface {
	Handle(ctx context.Context, t *Task, emit func(delta string) error) (Result, error)
}

// ErrUnavailable, returned by a handler (or wrapped in its error), says
// that this node, not the request, failed the task — out of memory, its
// model not loaded, shutting down: the task is answered "unavailable", and
// switchyard runs it again on another node (within the request's retry
// budget) instead of answering the client with a failure. Any other error
// fails the task.
var ErrUnavailable = errors.New("sdk: this node cannot run the task now")

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t *Task, emit func(delta string) error) (Result, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, t *Task, emit func(delta string) error) (Result, error) {
	return f(ctx, t, emit)
}

// Task is one assignment from the server.
type Task struct {
	ID      string
	Type    string // the capability it was routed by
	Content string
	Params  map[string]any // never nil
	Stream  bool           // whether emit reaches the client
	// Resume is set only on a resumed stream, and only for a node whose
	// NodeConfig.Resume is true: the text the client already has, from a
	// node that went away mid-stream. Emit only what follows it, and
	// return only that continuation as Result.Text (the coordinator joins
	// the two); Result.Usage counts this handler's own work.
	Resume string
}

// Result is what a handler returns.
type Result struct {
	Text  string
	Usage *Usage // optional; sent as null when nil
}

// Errors that end Node.Run for good.
var (
	// ErrReplaced: the server closed the connection with 4000 because another
	// connection with the same key and name registered. Reconnecting would
	// only fight over the identity, so the node stops, like GemmaNet's SDK.
	ErrReplaced = errors.New("sdk: replaced by a newer connection with the same name (close 4000)")
	// ErrAccountDeleted: the server closed the connection with 4003.
	ErrAccountDeleted = errors.New("sdk: the account was deleted (close 4003)")
)

// RegistrationError is the server's refusal of node_register. Run returns it
// when it is permanent (Code auth_failed or invalid_registration); other
// codes, such as too_many_nodes, are retried with backoff.
type RegistrationError struct {
	Code    string
	Message string
}

func (e *RegistrationError) Error() string {
	return fmt.Sprintf("sdk: registration refused: %s: %s", e.Code, e.Message)
}

// Permanent reports whether retrying the same registration cannot succeed.
func (e *RegistrationError) Permanent() bool {
	return e.Code == string(wire.CodeAuthFailed) || e.Code == string(wire.CodeInvalidRegistration)
}

// NodeConfig configures a Node. Zero values mean the stated default.
type NodeConfig struct {
	URL          string   // ws://host:port/ws/node (wss, http and https also work); required
	APIKey       string   // the account's API key, 1–128 characters; required
	Name         string   // 1–64 characters; with the key it fixes the node id; required
	Capabilities []string // 1–32 task types, each ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$; required
	Languages    []string // at most 64, each 1–16 characters; default none
	ModelInfo    map[string]any
	// MaxConcurrency is how many handlers may run at once; sent to the
	// server as max_concurrency. Default 1.
	MaxConcurrency int
	// Version is the node software's version (at most 64 characters) and
	// Labels its labels (at most 16; keys ^[a-z0-9][a-z0-9_.-]{0,62}$,
	// values 1–128 characters), such as {"region": "eu-west"}: shown in
	// the node listing, and a request may require labels. Both optional.
	Version string
	Labels  map[string]string
	Handler Handler // required
	// Resume declares that Handler can continue a stream that another
	// node began (Task.Resume): the coordinator may then hand this node a
	// stream whose node went away after its client had some of it. Set it
	// only when the handler honours Task.Resume. A node without it is
	// never sent a resumed stream, and refuses one (status "rejected")
	// rather than repeat what the client has. Default false.
	Resume bool
	// HeartbeatInterval between heartbeats. Default 30 s.
	HeartbeatInterval time.Duration
	// PingInterval between WebSocket pings; a ping unanswered for as long
	// drops the connection (and reconnects), which catches a server that
	// vanished without closing. Default 20 s, like GemmaNet's SDK.
	PingInterval time.Duration
	// MinBackoff and MaxBackoff bound the reconnect delay, which doubles
	// after each failed attempt (jittered) and resets after a successful
	// registration. Defaults 1 s and 60 s. A close 1013 whose reason says
	// when to come back (retry_after_ms, docs/PROTOCOL.md) is waited out
	// instead, jittered up to 20 % longer, but never longer than
	// MaxBackoff.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	Logger     *slog.Logger // default slog.Default()
	// OnRegistered, if set, is called with the node id after every
	// successful registration, before any task is served.
	OnRegistered func(nodeID string)
}

var (
	capabilityRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	labelKeyRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
)

// withDefaults validates c and returns a copy with defaults filled in.
func (c NodeConfig) withDefaults() (NodeConfig, error) {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return c, errors.New("sdk: NodeConfig.URL is required (ws://HOST:PORT/ws/node)")
	case err != nil:
		return c, fmt.Errorf("sdk: NodeConfig.URL: %w", err)
	case u.Scheme != "ws" && u.Scheme != "wss" && u.Scheme != "http" && u.Scheme != "https":
		return c, fmt.Errorf("sdk: NodeConfig.URL %q must start with ws:// or wss://", c.URL)
	case u.Host == "":
		return c, fmt.Errorf("sdk: NodeConfig.URL %q has no host", c.URL)
	}
	if n := utf8.RuneCountInString(c.APIKey); n < 1 || n > 128 {
		return c, errors.New("sdk: NodeConfig.APIKey is required (1–128 characters)")
	}
	if n := utf8.RuneCountInString(c.Name); n < 1 || n > 64 {
		return c, fmt.Errorf("sdk: NodeConfig.Name must be 1–64 characters, got %d", n)
	}
	if n := len(c.Capabilities); n < 1 || n > 32 {
		return c, fmt.Errorf("sdk: NodeConfig.Capabilities must list 1–32 task types, got %d", n)
	}
	for _, cp := range c.Capabilities {
		if !capabilityRE.MatchString(cp) {
			return c, fmt.Errorf("sdk: capability %q must match %s", cp, capabilityRE)
		}
	}
	if len(c.Languages) > 64 {
		return c, fmt.Errorf("sdk: NodeConfig.Languages may list at most 64, got %d", len(c.Languages))
	}
	for _, l := range c.Languages {
		if n := utf8.RuneCountInString(l); n < 1 || n > 16 {
			return c, fmt.Errorf("sdk: language %q must be 1–16 characters", l)
		}
	}
	if mi, err := json.Marshal(c.ModelInfo); err != nil || len(mi) > 2048 {
		return c, fmt.Errorf("sdk: NodeConfig.ModelInfo must encode as JSON of at most 2048 bytes (%d bytes, %v)", len(mi), err)
	}
	if utf8.RuneCountInString(c.Version) > 64 {
		return c, errors.New("sdk: NodeConfig.Version must be at most 64 characters")
	}
	if len(c.Labels) > 16 {
		return c, fmt.Errorf("sdk: NodeConfig.Labels may hold at most 16, got %d", len(c.Labels))
	}
	for k, v := range c.Labels {
		if !labelKeyRE.MatchString(k) {
			return c, fmt.Errorf("sdk: label key %q must match %s", k, labelKeyRE)
		}
		if n := utf8.RuneCountInString(v); n < 1 || n > 128 {
			return c, fmt.Errorf("sdk: the value of label %q must be 1–128 characters", k)
		}
	}
	if c.Handler == nil {
		return c, errors.New("sdk: NodeConfig.Handler is required")
	}
	if c.MaxConcurrency < 0 || c.HeartbeatInterval < 0 || c.PingInterval < 0 || c.MinBackoff < 0 || c.MaxBackoff < 0 {
		return c, errors.New("sdk: NodeConfig durations and MaxConcurrency must not be negative")
	}
	// Copy the slices and map so that a caller changing theirs later does
	// not change what a reconnect sends.
	c.Capabilities = append([]string(nil), c.Capabilities...)
	c.Languages = append([]string{}, c.Languages...)
	mi := make(map[string]any, len(c.ModelInfo))
	for k, v := range c.ModelInfo {
		mi[k] = v
	}
	c.ModelInfo = mi
	c.Labels = maps.Clone(c.Labels)
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = 1
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 30 * time.Second
	}
	if c.PingInterval == 0 {
		c.PingInterval = 20 * time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 60 * time.Second
	}
	if c.MinBackoff > c.MaxBackoff {
		return c, fmt.Errorf("sdk: NodeConfig.MinBackoff (%v) must not exceed MaxBackoff (%v)", c.MinBackoff, c.MaxBackoff)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// features are the protocol extensions node_register declares.
func (c NodeConfig) features() []string {
	// The node stops a cancelled task's handler (task.go), so the server
	// may tell it to and free the slot at once.
	f := []string{wire.FeatureTaskCancel}
	if c.Resume {
		f = append(f, wire.FeatureResume)
	}
	return f
}

// Node is the node agent: it holds one WebSocket to the coordinator at a
// time, serves the tasks it is assigned and reconnects when the connection
// drops.
type Node struct {
	cfg     NodeConfig
	log     *slog.Logger
	slots   chan struct{} // a token per running handler; cap MaxConcurrency
	active  atomic.Int64  // running handlers, reported in heartbeats
	running atomic.Bool   // Run in progress

	// sleep waits d between attempts, false if ctx ended first; replaced
	// in tests, so that they judge the waits without taking them.
	sleep func(ctx context.Context, d time.Duration) bool
	rand  func() float64 // [0, 1): the jitter of a hinted wait

	mu     sync.Mutex
	nodeID string
}

// NewNode validates cfg and returns a Node that is not yet connected.
func NewNode(cfg NodeConfig) (*Node, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Node{
		cfg:   c,
		log:   c.Logger.With("node_name", c.Name),
		slots: make(chan struct{}, c.MaxConcurrency),
		sleep: sleep,
		rand:  rand.Float64,
	}, nil
}

// NodeID returns the id the server assigned at the last registration, or ""
// before the first one.
func (n *Node) NodeID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodeID
}

func (n *Node) setNodeID(id string) {
	n.mu.Lock()
	n.nodeID = id
	n.mu.Unlock()
}

// Run connects, registers and serves tasks, reconnecting with backoff, until
// ctx is done (it returns nil then) or the server stops the node for good:
// ErrReplaced, ErrAccountDeleted or a permanent *RegistrationError. Every
// handler has returned and every goroutine Run started has ended before it
// returns. Run may not be called again while it is running.
func (n *Node) Run(ctx context.Context) error {
	if !n.running.CompareAndSwap(false, true) {
		return errors.New("sdk: Node.Run is already running")
	}
	defer n.running.Store(false)

	bo := newBackoff(n.cfg.MinBackoff, n.cfg.MaxBackoff)
	var delay time.Duration // the first attempt goes at once
	for {
		if delay > 0 && !n.sleep(ctx, delay) {
			return nil
		}
		registered, err := n.connect(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if stop := permanent(err); stop != nil {
			return stop
		}
		if registered {
			bo.reset()
		}
		// A draining server (1001) wants its nodes elsewhere now. Only after
		// a session that was serving, though: a server that refused the
		// handshake with 1001 must not be hammered in a tight loop.
		if registered && closeStatus(err) == int(websocket.StatusGoingAway) {
			delay = 0
			n.log.Info("server is draining; reconnecting now", "err", err)
			continue
		}
		// A coordinator that shed the registration says when a slot is
		// likely free: coming back then, rather than on the backoff's
		// schedule, is what spreads a burst of nodes over the time it
		// takes. The backoff stays where it was.
		if hint, ok := retryAfter(err); ok {
			delay = min(hint+time.Duration(0.2*n.rand()*float64(hint)), n.cfg.MaxBackoff)
			n.log.Info("the coordinator is busy; retrying when it said", "err", err, "in", delay.Round(time.Millisecond))
			continue
		}
		delay = bo.next()
		msg := "connection failed; retrying"
		if registered {
			msg = "disconnected; reconnecting"
		}
		n.log.Warn(msg, "err", err, "in", delay.Round(time.Millisecond))
	}
}

// sleep waits d, or until ctx ends (false then).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retryAfter is the wait a close 1013 asks for in its reason, if it does.
func retryAfter(err error) (time.Duration, bool) {
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != wire.CloseTryAgainLater {
		return 0, false
	}
	return wire.ParseRetryAfter(ce.Reason)
}

// permanent returns the error Run should stop with, or nil to retry.
func permanent(err error) error {
	var re *RegistrationError
	switch {
	case errors.As(err, &re) && re.Permanent():
		return re
	case closeStatus(err) == wire.CloseReplaced:
		return ErrReplaced
	case closeStatus(err) == wire.CloseAccountDeleted:
		return ErrAccountDeleted
	case closeStatus(err) == wire.CloseAuthFailed:
		// Closed with 4001 without the error message that normally comes first.
		return &RegistrationError{Code: string(wire.CodeAuthFailed), Message: "closed with 4001"}
	}
	return nil
}
