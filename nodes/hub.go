package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// ErrUnknownKey is what an Authenticator returns for a key that is not live.
// Any other error means "cannot tell now" and the node is asked to retry.
var ErrUnknownKey = errors.New("unknown API key")

// ErrClientKey is what an Authenticator returns for a live key that may
// not connect nodes (a client-only key): refused as an unknown key is, with
// this as the reason.
var ErrClientKey = errors.New("this API key is for clients only; connect nodes with a node key")

// ErrShuttingDown is returned by Serve once Shutdown has begun.
var ErrShuttingDown = errors.New("nodes: hub is shutting down")

// Account is what the hub needs to know of a node's account.
type Account struct {
	ID    string
	Trust string
	// KeyPrefix names the API key the node authenticated with (its display
	// prefix, as the store lists it): a revoked key's nodes are found by
	// it (CloseKey). "" matches no revocation.
	KeyPrefix string
	// TaskTypes are the capabilities the key may serve; nil: any. A node
	// that declares another is refused at registration.
	TaskTypes []string
}

// Authenticator resolves a node's API key to its account.
type Authenticator interface {
	AuthenticateNode(ctx context.Context, apiKey string) (Account, error)
}

// Config configures a Hub. Zero values take the defaults shown.
type Config struct {
	Instance           string        // this instance's id (required)
	MaxNodesPerAccount int           // default 5; nodes online per account, cluster-wide
	DefaultConcurrency int           // default 4; max_concurrency of a node that does not declare one
	RegisterTimeout    time.Duration // default 10s; the first message must arrive within it
	PingInterval       time.Duration // default 20s; a node silent this long (Heard) is pinged
	PingTimeout        time.Duration // default 15s; an unanswered ping closes the socket
	WriteTimeout       time.Duration // default 10s per message
	SendQueue          int           // default 256 messages; a node further behind is dropped
	// MaxRegistering (default 32 per GOMAXPROCS, at least 32 and at most
	// 1,024: 64 on 2 cores) bounds the registrations past their
	// node_register in progress at once (each loads the node's reputation,
	// takes its claim and announces it: store and Redis round trips). One
	// more is closed with 1013 at once, its reason telling the node when a
	// slot is likely free (retry_after_ms, shed.go): a reconnect storm is
	// shed at the door and spread over the time it takes, instead of
	// timing out in the store and Redis, and piling up retries
	// (invariant 14).
	MaxRegistering int
	// SendQueueBytes (default 16 MiB) bounds the same queue in bytes, each
	// message charged its length plus 64: 256 assigns of the largest
	// content would otherwise hold hundreds of MiB for one slow node. A
	// message finding the queue empty always goes in.
	SendQueueBytes  int64
	MaxMessageBytes int64 // default 4 MiB; a larger message closes the socket with 1009
	// QuarantineAfter (default 5; -1: never) is how many tasks in a row,
	// for at least two accounts, must fail on a node, or how many of its
	// usage reports in a row must be implausible, before it is quarantined
	// (quarantine.go); QuarantineCoolOff (default 10m) is how long it stays
	// so unless resumed by hand.
	QuarantineAfter   int
	QuarantineCoolOff time.Duration
	// Benchmarks, if set, keeps node benchmark profiles, and nodes are asked
	// for one after they register and whenever theirs is older than
	// BenchmarkMaxAge (default 6h); a request unanswered for
	// BenchmarkReplyTimeout (default 300s) is given up. nil: no benchmarks.
	Benchmarks            Benchmarks
	BenchmarkMaxAge       time.Duration
	BenchmarkReplyTimeout time.Duration
	Logger                *slog.Logger // default slog.Default()
	Registerer            prometheus.Registerer
	// Now is the clock by which the pinger judges a node silent (Heard);
	// default time.Now. Tests step it.
	Now func() time.Time

	// Hooks, fixed at construction; nil means no-op.

	// BeforeAttach runs on the node's Serve goroutine after the node is
	// accepted and before it is claimed and routable (to load its
	// reputation, say): slow work goes here, so the window between taking
	// the claim and becoming visible as its holder stays short.
	BeforeAttach func(ctx context.Context, nodeID, accountID, name string)
	// OnReplaced is called when a claim displaced a connection held by
	// another instance, so that instance can be told to close its socket of
	// the node (any generation below gen): invariant 1 across instances.
	OnReplaced func(nodeID, prevOwner string, gen uint64)
	// Changes, if set, is told of every node whose directory entry may
	// have changed: it arrived or left, took or gave back a slot, reported
	// its CPU, got a benchmark. The cluster directory reads it, so that it
	// writes what changed and never looks at idle nodes (invariant 12).
	// Marking never blocks; nil: nothing is told.
	Changes *Changes
	// Announce runs after a node is attached here and before it is
	// sent node_registered: the cluster directory writes and publishes the
	// arrival there, so the node is routable from every instance once it is
	// told it is registered (invariant 11). It bounds its own time and
	// leaves the node registered here if it fails (invariant 10).
	Announce func(ctx context.Context, s *Session)
	// LocalSlots is told when a node connected here may have a slot free
	// again (a task ended, the node arrived or serves again), after the
	// waiters were woken: the async pump looks for queued work then. It
	// must not block; nil: nothing is told. Remote nodes' slots do not
	// call it.
	LocalSlots func()
}

// DefaultConfig is the hub's defaults, each field as a zero value takes
// it (server.DefaultConfig takes its node figures from here).
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	if c.MaxNodesPerAccount == 0 {
		c.MaxNodesPerAccount = 5
	}
	if c.DefaultConcurrency == 0 {
		c.DefaultConcurrency = 4
	}
	if c.QuarantineAfter == 0 {
		c.QuarantineAfter = 5
	}
	if c.QuarantineCoolOff == 0 {
		c.QuarantineCoolOff = 10 * time.Minute
	}
	if c.RegisterTimeout == 0 {
		c.RegisterTimeout = 10 * time.Second
	}
	if c.PingInterval == 0 {
		c.PingInterval = 20 * time.Second
	}
	if c.PingTimeout == 0 {
		c.PingTimeout = 15 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.SendQueue == 0 {
		c.SendQueue = 256
	}
	if c.MaxRegistering == 0 {
		c.MaxRegistering = defaultMaxRegisteringHere()
	}
	if c.SendQueueBytes == 0 {
		c.SendQueueBytes = 16 << 20
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = wire.MaxMessageBytes
	}
	if c.BenchmarkMaxAge == 0 {
		c.BenchmarkMaxAge = 6 * time.Hour
	}
	if c.BenchmarkReplyTimeout == 0 {
		c.BenchmarkReplyTimeout = 300 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.BeforeAttach == nil {
		c.BeforeAttach = func(context.Context, string, string, string) {}
	}
	if c.OnReplaced == nil {
		c.OnReplaced = func(string, string, uint64) {}
	}
	if c.Announce == nil {
		c.Announce = func(context.Context, *Session) {}
	}
	return c
}

// Hub is the set of node sessions connected to this instance. It runs the
// handshake, enforces one connection per node identity, and is the local
// Directory.
type Hub struct {
	cfg     Config
	auth    Authenticator
	claims  Claims
	events  Events
	metrics *metrics
	log     *slog.Logger

	// Requests that found every capable node full wait here for a slot.
	waiters *Waiters

	mu       sync.RWMutex
	sessions map[string]*Session   // node id → its current session
	byCap    map[string][]*Session // capability → sessions; rebuilt on change, read without copying
	serving  int                   // Serve calls in progress
	draining bool
	bg       sync.WaitGroup // benchmark saves in flight
	fences   map[string]fence
	idle     chan struct{} // closed when draining and serving reaches 0
	pingStop chan struct{} // closed to stop the pinger (runs while serving > 0)
	pingDone chan struct{} // closed when it has stopped

	registering chan struct{} // a slot per registration in progress (Config.MaxRegistering)
	shed        *shedPacer    // when to tell a registration turned away to come back
}

// NewHub returns a hub. events receives task traffic from every session.
func NewHub(cfg Config, auth Authenticator, claims Claims, events Events) *Hub {
	cfg = cfg.withDefaults()
	ws := NewWaiters()
	h := &Hub{
		cfg:         cfg,
		auth:        auth,
		claims:      claims,
		events:      events,
		metrics:     newMetrics(cfg.Registerer, ws),
		log:         cfg.Logger,
		sessions:    make(map[string]*Session),
		fences:      make(map[string]fence),
		byCap:       make(map[string][]*Session),
		idle:        make(chan struct{}),
		waiters:     ws,
		registering: make(chan struct{}, cfg.MaxRegistering),
		shed:        newShedPacer(cfg.MaxRegistering),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(versionCollector{h})
	}
	return h
}

// WaitSlot queues a request that found every node with capability full;
// it is woken when a slot may have freed for it (see Waiters).
func (h *Hub) WaitSlot(capability string, p Place) *Waiter { return h.waiters.Wait(capability, p) }

// Waiting returns the requests waiting here for a slot, by capability.
func (h *Hub) Waiting() map[string]WaitStat { return h.waiters.Waiting() }

// WakeSlots wakes up to n waiters of each of f's capabilities that its
// node can serve: it has n free slots more (here, or on another instance).
// It costs nothing when none waits, which is the common case on the hot
// path.
func (h *Hub) WakeSlots(f Freed, n int) { h.waiters.Wake(f, n) }

// localSlotsFreed is WakeSlots for a node connected here, which also tells
// LocalSlots.
func (h *Hub) localSlotsFreed(s *Session, n int) {
	h.waiters.Wake(Freed{Capabilities: s.Info.Capabilities, Trust: s.Info.Trust, Labels: s.Info.Labels, Local: true}, n)
	if h.cfg.LocalSlots != nil {
		h.cfg.LocalSlots()
	}
}

// Serve runs the handshake of one node connection on the calling goroutine
// and, once the node is registered, hands the connection to two goroutines
// of its own (a reader and a writer, which starts a short-lived one per
// ping) and returns. The caller's goroutine,
// typically an HTTP handler's with a deep stack, is then free to end: an
// idle node costs only its two small goroutines. ctx should be the server's
// root context (never a hijacked request's). remote is the client's
// address, for logs.
func (h *Hub) Serve(ctx context.Context, conn *websocket.Conn, remote string, heard *Heard) error {
	if heard == nil {
		heard = NewHeard() // only messages and pongs count then
	}
	heard.setClock(h.cfg.Now) // before anything is read from the node
	h.mu.Lock()
	if h.draining {
		h.mu.Unlock()
		_ = conn.Close(wire.CloseDraining, "server draining")
		return ErrShuttingDown
	}
	h.serving++
	if h.serving == 1 {
		h.pingStop, h.pingDone = make(chan struct{}), make(chan struct{})
		go h.pingLoop(h.pingStop, h.pingDone)
	}
	h.mu.Unlock()
	handedOff := false
	defer func() {
		if !handedOff {
			h.done()
		}
	}()

	conn.SetReadLimit(h.cfg.MaxMessageBytes)
	reg, acct, ok := h.handshake(ctx, conn, remote)
	if !ok {
		return nil
	}
	select {
	case h.registering <- struct{}{}:
	default:
		h.shedRegistration(conn)
		return nil
	}
	took := time.Now()
	registering := true
	release := func() {
		<-h.registering
		registering = false
		h.shed.held(time.Since(took))
	}
	defer func() {
		if registering {
			release()
		}
	}()
	nodeID := NodeID(acct.ID, reg.Name)
	log := h.log.With("node_id", nodeID, "name", reg.Name, "remote", remote)
	// Slow work (the store) before the claim, so the window between taking
	// the claim and becoming visible as its holder is as short as it can be.
	h.cfg.BeforeAttach(ctx, nodeID, acct.ID, reg.Name)
	claim, err := h.claims.Claim(ctx, h.cfg.Instance, nodeID, acct.ID, h.cfg.MaxNodesPerAccount)
	switch {
	case errors.Is(err, ErrTooManyNodes):
		h.reject(conn, "too_many_nodes", wire.CodeTooManyNodes,
			fmt.Sprintf("this account already has %d nodes online", h.cfg.MaxNodesPerAccount), wire.ClosePolicy)
		return nil
	case err != nil:
		log.Warn("cannot claim node identity", "err", err)
		h.reject(conn, "unavailable", wire.CodeUnavailable, "the coordinator cannot register nodes right now; retry later", wire.CloseTryAgainLater)
		return nil
	}

	maxc := reg.MaxConcurrency
	if maxc == 0 {
		maxc = h.cfg.DefaultConcurrency
	}
	s := &Session{
		NodeID:      nodeID,
		Gen:         claim.Gen,
		Remote:      remote,
		ConnectedAt: time.Now(),
		Info: Info{
			Name: reg.Name, AccountID: acct.ID, Trust: acct.Trust, KeyPrefix: acct.KeyPrefix,
			Capabilities: reg.Capabilities, Languages: reg.Languages,
			ModelInfo: reg.ModelInfo, MaxConcurrency: maxc, TaskCancel: reg.TaskCancel, Resume: reg.Resume,
			Version: reg.Version, Labels: reg.Labels,
		},
		conn:       conn,
		heard:      heard,
		hub:        h,
		log:        log,
		wake:       make(chan struct{}, 1),
		writerDone: make(chan struct{}),
		writeWatch: newWriteWatch(conn),
		// The socket is Serve's until node_registered is written: a task
		// sent once the session is attached is queued behind it, not
		// written ahead of it by SendDirect.
		writing: true,
	}
	prev, fenced := h.attach(s)
	if prev != nil {
		// Invariant 1: the newest connection wins. The old one's tasks fail
		// now (from its writer), not when its close handshake finishes.
		prev.Close(wire.CloseReplaced, "replaced by a newer connection")
	}
	h.cfg.Announce(ctx, s)
	// Registered: what is left (the answer, the benchmark probe, the
	// replace) is cheap or its own. The slot goes back before the answer,
	// so a node that has node_registered finds it free.
	release()
	// node_registered is written once the node is routable (so a node that
	// has it can be sent tasks at once) and before the writer starts (so it
	// is always the node's first message, even if this connection is
	// replaced a moment later; tasks queued meanwhile follow it).
	wctx, cancel := context.WithTimeout(ctx, h.cfg.WriteTimeout)
	err = conn.Write(wctx, websocket.MessageText, wire.MustEncode(wire.MsgNodeRegistered, wire.RegisteredPayload{NodeID: nodeID}))
	cancel()
	s.mu.Lock()
	s.writing = false // the writer takes what was queued meanwhile
	s.mu.Unlock()
	if err != nil {
		s.Close(wire.CloseUnanswered, "write failed")
	}
	if fenced {
		// Another instance took the node while this claim was being made,
		// and its replace arrived before this session was visible.
		s.Close(wire.CloseReplaced, "replaced by a newer connection")
	}
	go s.writeLoop(ctx)
	h.startBenchmark(ctx, s)
	if claim.PrevOwner != "" && claim.PrevOwner != h.cfg.Instance {
		h.cfg.OnReplaced(nodeID, claim.PrevOwner, claim.Gen)
	}
	h.metrics.registered.Inc()
	log.Info("node registered", "gen", claim.Gen, "capabilities", reg.Capabilities, "max_concurrency", maxc)
	handedOff = true
	go h.run(ctx, s)
	return nil
}

// run reads a session's messages until it ends, then lets its claim go.
func (h *Hub) run(ctx context.Context, s *Session) {
	defer h.done()
	s.readLoop(ctx)
	<-s.writerDone
	// A fresh context: the root one may be cancelled (shutdown), and the
	// claim must still be let go.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.claims.Release(rctx, h.cfg.Instance, s.held()); err != nil {
		s.log.Warn("cannot release node claim", "err", err)
	}
}

// handshake reads and checks node_register. On failure it has already told
// the node why and closed the connection.
func (h *Hub) handshake(ctx context.Context, conn *websocket.Conn, remote string) (Registration, Account, bool) {
	// A timer rather than a read deadline: coder/websocket drops the TCP
	// connection on a context expiry, and the node deserves a close frame.
	timedOut := make(chan struct{})
	timer := time.AfterFunc(h.cfg.RegisterTimeout, func() {
		defer close(timedOut)
		h.metrics.rejected.WithLabelValues("timeout").Inc()
		_ = conn.Close(wire.ClosePolicy, "node_register expected within "+h.cfg.RegisterTimeout.String())
	})
	typ, data, err := conn.Read(ctx)
	if !timer.Stop() {
		<-timedOut
		return Registration{}, Account{}, false
	}
	if err != nil {
		if errorsIsTooBig(err) {
			h.metrics.rejected.WithLabelValues("too_big").Inc()
		}
		return Registration{}, Account{}, false
	}
	if typ != websocket.MessageText {
		h.reject(conn, "invalid", wire.CodeInvalidRegistration, "binary frames are not part of the protocol", wire.ClosePolicy)
		return Registration{}, Account{}, false
	}
	msg, err := wire.DecodeEnvelope(data)
	if err == nil && msg.MsgType != wire.MsgNodeRegister {
		err = fmt.Errorf("the first message must be node_register, not %q", truncate(string(msg.MsgType), 64))
	}
	var reg Registration
	if err == nil {
		reg, err = DecodeRegister(msg.Payload)
	}
	if err != nil {
		h.reject(conn, "invalid", wire.CodeInvalidRegistration, truncate(err.Error(), 500), wire.ClosePolicy)
		return Registration{}, Account{}, false
	}
	acct, err := h.auth.AuthenticateNode(ctx, reg.APIKey)
	switch {
	case errors.Is(err, ErrUnknownKey):
		h.reject(conn, "auth_failed", wire.CodeAuthFailed, "Invalid API key", wire.CloseAuthFailed)
		return Registration{}, Account{}, false
	case errors.Is(err, ErrClientKey):
		h.reject(conn, "auth_failed", wire.CodeAuthFailed, ErrClientKey.Error(), wire.CloseAuthFailed)
		return Registration{}, Account{}, false
	case err != nil:
		h.log.Warn("cannot authenticate node", "remote", remote, "err", err)
		h.reject(conn, "unavailable", wire.CodeUnavailable, "the coordinator cannot check API keys right now; retry later", wire.CloseTryAgainLater)
		return Registration{}, Account{}, false
	}
	if len(acct.TaskTypes) > 0 {
		for _, c := range reg.Capabilities {
			if !slices.Contains(acct.TaskTypes, c) {
				h.reject(conn, "invalid", wire.CodeInvalidRegistration, truncate(fmt.Sprintf("capability %q is not one this API key may serve (%s)",
					c, strings.Join(acct.TaskTypes, ", ")), 500), wire.ClosePolicy)
				return Registration{}, Account{}, false
			}
		}
	}
	return reg, acct, true
}

// reject tells a node why it is refused and closes its connection. It runs
// before the session's writer exists, so it writes directly. A refusal
// that is only for now (code unavailable) sends no error message: any
// error during registration makes GemmaNet's SDK stop for good, while a
// bare close makes it retry.
func (h *Hub) reject(conn *websocket.Conn, label string, code wire.ErrorCode, message string, close websocket.StatusCode) {
	h.metrics.rejected.WithLabelValues(label).Inc()
	if code != wire.CodeUnavailable {
		wctx, cancel := context.WithTimeout(context.Background(), h.cfg.WriteTimeout)
		_ = conn.Write(wctx, websocket.MessageText, wire.MustEncode(wire.MsgError, wire.ErrorPayload{Code: string(code), Message: message}))
		cancel()
	}
	_ = conn.Close(close, truncate(message, 100))
}

// shedRegistration turns away a registration that found every slot
// taken, with a close 1013 whose reason says when to come back, and no
// error message (see reject).
func (h *Hub) shedRegistration(conn *websocket.Conn) {
	h.metrics.rejected.WithLabelValues("busy").Inc()
	wait := h.shed.shed(time.Now())
	_ = conn.Close(wire.CloseTryAgainLater, wire.RetryAfterReason(wait, "the coordinator is registering many nodes"))
}

func (h *Hub) done() {
	h.mu.Lock()
	h.serving--
	var pinger chan struct{}
	if h.serving == 0 {
		close(h.pingStop)
		pinger = h.pingDone
	}
	if h.draining && h.serving == 0 {
		close(h.idle)
	}
	h.mu.Unlock()
	if pinger != nil {
		<-pinger // it scans under h.mu's read lock: waited for outside it
	}
}

// pingLoop is the hub's one pinger, running while any connection is
// served: every PingInterval/4 it asks the writer of each node silent for
// PingInterval to ping it, so a silent node is pinged within 1¼
// PingIntervals. One ticker for the hub rather than one per session: each
// timer firing wakes the process, and on an idle fleet of thousands of
// nodes those wakeups were a large part of its CPU; a scan every second
// rather than every PingInterval/4 was another 11 % of an idle
// instance's CPU at 3,000 nodes (BENCHMARKS.md, "the fleet profile").
func (h *Hub) pingLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(max(h.cfg.PingInterval/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			h.pingSilent(h.cfg.Now())
		}
	}
}

// pingSilent asks the writer of each node silent for PingInterval at now
// to ping it.
func (h *Hub) pingSilent(now time.Time) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, s := range h.sessions {
		if s.heard.silentFor(now) >= h.cfg.PingInterval {
			s.wantPing()
		}
	}
}

// attach makes s the session of its node and returns the one it replaced,
// and whether a replace for a newer generation arrived before s was here.
func (h *Hub) attach(s *Session) (*Session, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fenced := false
	if f, ok := h.fences[s.NodeID]; ok {
		fenced = f.gen > s.Gen
		delete(h.fences, s.NodeID)
	}
	prev := h.sessions[s.NodeID]
	h.sessions[s.NodeID] = s
	if prev != nil {
		h.unindexLocked(prev)
	}
	h.indexLocked(s)
	h.metrics.connected.Set(float64(len(h.sessions)))
	defer h.localSlotsFreed(s, s.Info.MaxConcurrency)
	defer h.cfg.Changes.Mark(s.NodeID)
	return prev, fenced
}

// detach removes s if it is still its node's session.
func (h *Hub) detach(s *Session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions[s.NodeID] != s {
		return
	}
	delete(h.sessions, s.NodeID)
	h.unindexLocked(s)
	h.metrics.connected.Set(float64(len(h.sessions)))
	h.cfg.Changes.Mark(s.NodeID)
	s.stopQuarantine()
}

// indexLocked adds s to the capability index. Slices in the index are
// replaced, never modified, so a reader may keep one after the lock is gone.
func (h *Hub) indexLocked(s *Session) {
	for _, c := range s.Info.Capabilities {
		old := h.byCap[c]
		next := make([]*Session, len(old), len(old)+1)
		copy(next, old)
		h.byCap[c] = append(next, s)
	}
}

// unindexLocked removes s from the capability index.
func (h *Hub) unindexLocked(s *Session) {
	for _, c := range s.Info.Capabilities {
		old := h.byCap[c]
		next := make([]*Session, 0, len(old))
		for _, x := range old {
			if x != s {
				next = append(next, x)
			}
		}
		if len(next) == 0 {
			delete(h.byCap, c)
		} else {
			h.byCap[c] = next
		}
	}
}

// Session returns the current session of a node on this instance, or nil.
func (h *Hub) Session(nodeID string) *Session {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.sessions[nodeID]
}

// Sessions returns the current sessions, ordered by node id.
func (h *Hub) Sessions() []*Session {
	h.mu.RLock()
	out := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	h.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// Len is the number of nodes connected here.
func (h *Hub) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.sessions)
}

// withCapability returns the sessions that declared capability. The slice
// is shared and must not be modified.
func (h *Hub) withCapability(capability string) []*Session {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.byCap[capability]
}

// CloseAccount closes every session of an account (it was deleted) with 4003.
func (h *Hub) CloseAccount(accountID string) int {
	n := 0
	for _, s := range h.Sessions() {
		if s.Info.AccountID == accountID {
			s.Close(wire.CloseAccountDeleted, "account deleted")
			n++
		}
	}
	return n
}

// CloseKey closes every session that authenticated with a key now revoked
// (the account's key with that prefix) with 4001, and returns how many.
func (h *Hub) CloseKey(accountID, keyPrefix string) int {
	n := 0
	for _, s := range h.Sessions() {
		if s.Info.AccountID == accountID && s.Info.KeyPrefix == keyPrefix && keyPrefix != "" {
			s.Close(wire.CloseAuthFailed, "API key revoked")
			n++
		}
	}
	return n
}

// CloseReplaced closes this instance's session of nodeID if its generation
// is older than gen: another instance has a newer connection. When no
// session is here yet (a registration of the node may be between its claim
// and becoming visible), the generation is remembered, and such a session
// is closed as soon as it attaches.
func (h *Hub) CloseReplaced(nodeID string, gen uint64) bool {
	h.mu.Lock()
	s := h.sessions[nodeID]
	if s == nil {
		now := time.Now()
		for id, f := range h.fences { // forget old fences: nothing is that slow to attach
			if now.Sub(f.at) > time.Minute {
				delete(h.fences, id)
			}
		}
		if f := h.fences[nodeID]; f.gen < gen {
			h.fences[nodeID] = fence{gen: gen, at: now}
		}
	}
	h.mu.Unlock()
	if s == nil || s.Gen >= gen {
		return false
	}
	s.Close(wire.CloseReplaced, "replaced by a newer connection")
	return true
}

// fence is a replace that arrived before the session it was for.
type fence struct {
	gen uint64
	at  time.Time
}

// RefreshClaims keeps this instance's claims alive, and closes (with 4000)
// the sessions whose claim a newer connection elsewhere has taken: the
// fence of invariant 1, for the case where the replace envelope was lost.
func (h *Hub) RefreshClaims(ctx context.Context) error {
	sessions := h.Sessions()
	if len(sessions) == 0 {
		return nil
	}
	held := make([]Held, len(sessions))
	for i, s := range sessions {
		held[i] = s.held()
	}
	lost, err := h.claims.Refresh(ctx, h.cfg.Instance, held)
	if err != nil {
		return err
	}
	for _, l := range lost {
		if s := h.Session(l.NodeID); s != nil && s.Gen == l.Gen {
			h.metrics.stolen.Inc()
			s.log.Info("claim taken by a newer connection; closing this one")
			s.Close(wire.CloseReplaced, "replaced by a newer connection")
		}
	}
	return nil
}

// Shutdown stops accepting nodes, closes every session with 1001 (so nodes
// reconnect to another instance) and waits until they are gone or ctx ends.
func (h *Hub) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	if !h.draining {
		h.draining = true
		if h.serving == 0 {
			close(h.idle)
		}
	}
	h.mu.Unlock()
	for _, s := range h.Sessions() {
		s.Close(wire.CloseDraining, "server draining; reconnect")
	}
	select {
	case <-h.idle:
		h.bg.Wait()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("nodes: %d connections still open: %w", h.Len(), ctx.Err())
	}
}

func errorsIsTooBig(err error) bool { return errors.Is(err, websocket.ErrMessageTooBig) }
