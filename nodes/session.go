package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Info is what a node declared at registration; it never changes for the
// life of a session.
type Info struct {
	Name           string
	AccountID      string
	KeyPrefix      string // the API key it authenticated with (Account.KeyPrefix)
	Trust          string
	Capabilities   []string
	Languages      []string
	ModelInfo      json.RawMessage
	MaxConcurrency int
	// TaskCancel: the node declared FeatureTaskCancel. Only such a node is
	// sent task_cancel; GemmaNet's SDK cannot parse it.
	TaskCancel bool
	// Resume: the node declared FeatureResume: it may be given a stream to
	// continue (task_assign's resume_text).
	Resume  bool
	Version string            // "" when the node did not say
	Labels  map[string]string // nil when it declared none; never changed
}

// Events receives what a session's node sends about tasks. The tasks
// package implements it (the owner side). Calls for one session come from
// its reader goroutine, in order; Closed may come from another goroutine,
// once, as soon as the session starts closing.
type Events interface {
	Chunk(s *Session, c wire.TaskChunkPayload)
	Result(s *Session, r wire.TaskResultPayload)
	// BadResult is a task_result that names a task but cannot be read.
	BadResult(s *Session, taskID string, err error)
	// Closed is called once when the session stops taking work (replaced,
	// dropped or disconnected): its tasks must fail now.
	Closed(s *Session)
}

// Session is one node connection. Its identity fields are set before it
// becomes visible and never change.
type Session struct {
	NodeID      string
	Gen         uint64 // fencing generation of this connection's claim
	Info        Info
	Remote      string
	ConnectedAt time.Time

	conn  *websocket.Conn
	heard *Heard // when the node last said anything: pings go to silent nodes only
	hub   *Hub
	log   *slog.Logger

	// The send queue: a slice behind a mutex rather than a channel, so that
	// an idle connection costs no buffer (each idle node is budgeted at 32 KiB).
	mu          sync.Mutex
	queue       [][]byte
	queueBytes  int64 // what queue holds, each message charged its length plus sendOverhead
	closing     bool
	writing     bool // the writer loop or a direct sender (SendDirect) is writing (or Serve, until node_registered is written): the socket is taken
	closeCode   websocket.StatusCode
	closeReason string
	wake        chan struct{} // cap 1: the queue has work, the session is closing, or a ping is due
	pingDue     atomic.Bool   // set by the hub's pinger (the node has been silent), taken by the writer
	writerDone  chan struct{}
	closedOnce  sync.Once
	// writeWatch closes the connection when a write outlasts WriteTimeout:
	// armed around each write (writes are one at a time, see writing), so
	// that a write costs no context and timer of its own (write).
	writeWatch *time.Timer

	inflight    atomic.Int32
	state       atomic.Pointer[nodeState]    // nil: serving
	cpuBits     atomic.Uint64                // float64 bits of the last heartbeat's cpu_percent
	cpuMarked   float64                      // the CPU last marked as changed (the reader's alone)
	benchSentAt atomic.Int64                 // unix nanos of the outstanding benchmark request; 0: none
	bench       atomic.Pointer[benchSummary] // the latest benchmark, for routing
	standing    standing                     // the runs of failed tasks and implausible usage reports, for quarantine
}

func (s *Session) held() Held { return Held{NodeID: s.NodeID, AccountID: s.Info.AccountID, Gen: s.Gen} }

// TryAcquire takes one of the node's slots for a task. It fails when the
// node is at its max_concurrency or closing (invariant 7).
func (s *Session) TryAcquire() bool {
	maxc := int32(s.Info.MaxConcurrency)
	for {
		n := s.inflight.Load()
		if n >= maxc || s.isClosing() || !s.serving() {
			return false
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			s.hub.cfg.Changes.Mark(s.NodeID)
			return true
		}
	}
}

// Release returns a slot taken by TryAcquire.
func (s *Session) Release() {
	s.inflight.Add(-1)
	s.hub.cfg.Changes.Mark(s.NodeID)
	s.hub.localSlotsFreed(s, 1)
	s.closeIfDrained()
}

// InFlight is the number of tasks the node holds now.
func (s *Session) InFlight() int { return int(s.inflight.Load()) }

// FreeSlots is max_concurrency minus the tasks in flight; none while the
// node is paused or draining.
func (s *Session) FreeSlots() int {
	if !s.serving() {
		return 0
	}
	return max(s.Info.MaxConcurrency-s.InFlight(), 0)
}

// CPU is the cpu_percent of the node's last heartbeat.
func (s *Session) CPU() float64 { return math.Float64frombits(s.cpuBits.Load()) }

func (s *Session) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// sendOverhead is what a queued message costs beyond its bytes (its slice
// header and the queue's slot), so a flood of tiny messages is bounded by
// SendQueueBytes too (invariant 13).
const sendOverhead = 64

// Send queues a message for the node and never blocks. A node whose queue
// is full is too slow to keep up: it is dropped (closed with 1013) rather
// than allowed to stall the instance. Send reports whether the message was
// queued.
func (s *Session) Send(msg []byte) bool {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return false
	}
	cost := int64(len(msg)) + sendOverhead
	if len(s.queue) >= s.hub.cfg.SendQueue || (len(s.queue) > 0 && s.queueBytes+cost > s.hub.cfg.SendQueueBytes) {
		queued, bytes := len(s.queue), s.queueBytes
		s.mu.Unlock()
		s.hub.metrics.sendDrops.Inc()
		s.log.Warn("node send queue full, dropping the node", "queued", queued, "queued_bytes", bytes)
		s.Close(wire.CloseTryAgainLater, "send queue overflow")
		return false
	}
	s.queue = append(s.queue, msg)
	s.queueBytes += cost
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// SendDirect is Send for a caller that may wait on the socket (a request's
// own goroutine, never the bus's receive loop). When nothing is queued or
// being written, it writes msg itself: the hand-off to the writer goroutine
// may wake another thread, and such wakeups were about a third of an
// instance's CPU at 2,500 requests/s on two cores (docs/BENCHMARKS.md, "the
// floor, and fewer hand-offs"). Otherwise, or when ctx has ended already,
// it queues msg as Send does, behind what is there, so the node still gets
// its messages in the order they were sent. The write it does itself is
// bounded by WriteTimeout alone, as the writer's are, and a failed one
// closes the session as the writer's does. ctx only decides whether to
// write at all: the library closes a connection whose write's context
// ends (a frame may be half sent), even when the end races a write that
// has just finished, so a request whose client went away at that moment
// would cost the node its connection and every other task on it. The
// caller waits at most WriteTimeout for a node that stopped reading. It
// reports whether msg was written or queued.
func (s *Session) SendDirect(ctx context.Context, msg []byte) bool {
	s.mu.Lock()
	if s.closing || s.writing || len(s.queue) > 0 || ctx.Err() != nil {
		s.mu.Unlock()
		return s.Send(msg)
	}
	s.writing = true
	s.mu.Unlock()
	err := s.write(msg)
	s.mu.Lock()
	s.writing = false
	more := len(s.queue) > 0
	s.mu.Unlock()
	if err != nil {
		s.log.Debug("write to node failed", "err", err)
		s.Close(wire.CloseUnanswered, "write failed")
		return true // as a queued message whose write fails: the session's close fails its tasks
	}
	if more { // queued behind this write: the writer's now
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// SendError sends an `error` message to the node.
func (s *Session) SendError(code wire.ErrorCode, message string) bool {
	return s.Send(wire.MustEncode(wire.MsgError, wire.ErrorPayload{Code: string(code), Message: message}))
}

// Close starts closing the session with a close code; it returns at once.
// The first call wins. The node's tasks are failed from the writer
// goroutine, before the close handshake (which may take seconds).
func (s *Session) Close(code websocket.StatusCode, reason string) {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		s.closeCode, s.closeReason = code, reason
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// writeLoop writes the messages Send queued (and SendDirect, when it
// could not write at once), in order. It is not the socket's only writer
// of messages: SendDirect writes one itself on its caller's goroutine, and
// Serve writes node_registered before the loop starts. The writing flag,
// under mu, gives the socket to one writer at a time and keeps messages in
// the order they were sent: a direct write happens only when nothing is
// queued or being written, and while one is under way the writer leaves
// the queue alone (what is queued meanwhile waits; the direct sender wakes
// the writer when it is done). Pings and the close frame are control
// frames, which coder/websocket writes safely beside a message write.
//
// The loop also pings the node when the hub's pinger finds it silent (one
// ticker for the whole hub, not one per session: on a large idle fleet each
// timer firing is a wakeup of the process), so a dead socket is noticed even
// when nothing else is sent. A ping waits for its pong (up to PingTimeout
// for a sluggish node), and assigns and cancels must not queue behind it, so
// each ping runs on a goroutine of its own beside the writer:
// coder/websocket allows Ping concurrently with Write (only Read and Reader
// are single-caller), and the pong is read by the session's reader. One ping
// at a time; the writer owns it, cancels it when the session closes, and
// waits for it. The goroutine lives only while a ping is out, so an idle
// node costs two goroutines and no timer.
func (s *Session) writeLoop(ctx context.Context) {
	defer close(s.writerDone)
	var (
		pinger   sync.WaitGroup
		pinging  atomic.Bool
		stopPing context.CancelFunc = func() {}
	)
	defer pinger.Wait()
	var batch [][]byte
	for {
		select {
		case <-s.wake:
		case <-ctx.Done():
			s.Close(wire.CloseDraining, "server shutting down")
		}
		s.mu.Lock()
		closing := s.closing
		// While a direct sender writes, the queue waits: it wakes the
		// writer when it is done.
		if !closing && !s.writing {
			batch, s.queue = s.queue, batch[:0]
			s.queueBytes = 0 // the batch is the writer's now: at most one queue's worth more
			s.writing = len(batch) > 0
		}
		s.mu.Unlock()
		if closing {
			stopPing()
			s.shutdown()
			return
		}
		if s.pingDue.Swap(false) && pinging.CompareAndSwap(false, true) {
			pctx, cancel := context.WithTimeout(ctx, s.hub.cfg.PingTimeout)
			stopPing = cancel
			pinger.Go(func() {
				defer pinging.Store(false)
				s.ping(pctx)
				cancel()
			})
		}
		for i, msg := range batch {
			err := s.write(msg)
			batch[i] = nil
			if err != nil {
				s.log.Debug("write to node failed", "err", err)
				s.Close(wire.CloseUnanswered, "write failed")
				break
			}
		}
		if len(batch) > 0 {
			clear(batch)
			batch = batch[:0]
			s.mu.Lock()
			s.writing = false
			s.mu.Unlock()
		}
	}
}

// wantPing asks the writer to ping the node (the hub's pinger found it
// silent for PingInterval).
func (s *Session) wantPing() {
	s.pingDue.Store(true)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ping pings the node once and closes the session if no pong comes
// before ctx's deadline. A ping cancelled by the writer (the session is
// closing, or the server is) is not a dead node.
func (s *Session) ping(ctx context.Context) {
	err := s.conn.Ping(ctx)
	switch {
	case err == nil:
		s.heard.mark()
	case !errors.Is(ctx.Err(), context.Canceled):
		s.Close(wire.CloseUnanswered, "ping unanswered")
	}
}

// shutdown runs once, on the writer goroutine: take the session out of
// routing, fail its tasks, then do the close handshake.
func (s *Session) shutdown() {
	s.closedOnce.Do(func() {
		s.hub.detach(s)
		s.hub.events.Closed(s)
		s.mu.Lock()
		code, reason := s.closeCode, s.closeReason
		s.queue = nil
		s.mu.Unlock()
		s.hub.metrics.closes.WithLabelValues(closeLabel(code)).Inc()
		s.log.Info("node disconnected", "code", int(code), "reason", reason)
		_ = s.conn.Close(code, reason)
	})
}

// write writes one message, bounded by WriteTimeout: past it, writeWatch
// closes the connection (as the library does when a write's context ends)
// and the write fails. Only the one holding the socket (writing) calls it.
func (s *Session) write(msg []byte) error {
	s.writeWatch.Reset(s.hub.cfg.WriteTimeout)
	err := s.conn.Write(context.Background(), websocket.MessageText, msg)
	s.writeWatch.Stop()
	return err
}

// newWriteWatch is a session's writeWatch, stopped.
func newWriteWatch(conn *websocket.Conn) *time.Timer {
	t := time.AfterFunc(time.Hour, func() { _ = conn.CloseNow() })
	t.Stop()
	return t
}

// readLoop reads the node's messages until the connection ends or ctx
// does (then the connection is closed under the read, as the library
// would close it for a read's own context; one watch for the session's
// life instead of one per read).
func (s *Session) readLoop(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = s.conn.CloseNow() })
	defer stop()
	for {
		typ, data, err := s.conn.Read(context.Background())
		if err == nil {
			s.heard.mark()
		}
		if err != nil {
			code := websocket.CloseStatus(err)
			switch {
			case code == wire.CloseTooBig || errorsIsTooBig(err):
				// The library has already sent 1009.
				s.Close(wire.CloseTooBig, "message too big")
			case code != -1:
				s.Close(code, "closed by the node")
			default:
				s.Close(wire.CloseUnanswered, "connection lost")
			}
			return
		}
		if typ != websocket.MessageText {
			s.hub.metrics.invalid.WithLabelValues("binary").Inc()
			s.Close(wire.CloseUnsupported, "binary frames are not part of the protocol")
			return
		}
		s.handle(data)
	}
}

func (s *Session) handle(data []byte) {
	msg, err := readFast(data, wire.Codec.DecodeEnvelope)
	if err != nil {
		s.hub.metrics.invalid.WithLabelValues("envelope").Inc()
		s.SendError(wire.CodeInvalidMessage, err.Error())
		return
	}
	switch msg.MsgType {
	case wire.MsgHeartbeat:
		hb := wire.DecodeHeartbeat(msg.Payload)
		s.cpuBits.Store(math.Float64bits(hb.CPUPercent))
		// The directory writes a CPU change of cpuStep points or more:
		// smaller ones need not wake it (its 30 s scan catches the rest).
		if math.Abs(hb.CPUPercent-s.cpuMarked) >= cpuStep {
			s.cpuMarked = hb.CPUPercent
			s.hub.cfg.Changes.Mark(s.NodeID)
		}
		s.hub.maybeBenchmark(s, time.Now())
	case wire.MsgTaskChunk:
		c, err := readFast(msg.Payload, wire.Codec.DecodeTaskChunk)
		if err != nil {
			s.hub.metrics.invalid.WithLabelValues(string(wire.MsgTaskChunk)).Inc()
			s.SendError(wire.CodeInvalidMessage, err.Error())
			return
		}
		s.hub.events.Chunk(s, c)
	case wire.MsgTaskResult:
		r, err := readFast(msg.Payload, wire.Codec.DecodeTaskResult)
		if err != nil {
			s.hub.metrics.invalid.WithLabelValues(string(wire.MsgTaskResult)).Inc()
			s.SendError(wire.CodeInvalidMessage, err.Error())
			if r.TaskID != "" {
				s.hub.events.BadResult(s, r.TaskID, err)
			}
			return
		}
		s.hub.events.Result(s, r)
	case wire.MsgBenchmarkResult:
		s.hub.benchmarkResult(s, msg.Payload)
	case wire.MsgNodeRegister:
		s.hub.metrics.invalid.WithLabelValues("out_of_order").Inc()
		s.SendError(wire.CodeUnexpectedMessage, "this connection is already registered")
	default:
		s.hub.metrics.invalid.WithLabelValues("unknown_type").Inc()
		s.SendError(wire.CodeUnexpectedMessage, "unknown msg_type "+truncate(string(msg.MsgType), 64))
	}
}

func closeLabel(code websocket.StatusCode) string {
	switch code {
	case wire.CloseNormal:
		return "1000"
	case wire.CloseDraining:
		return "1001"
	case wire.CloseUnsupported:
		return "1003"
	case wire.ClosePolicy:
		return "1008"
	case wire.CloseTooBig:
		return "1009"
	case wire.CloseUnanswered:
		return "1011"
	case wire.CloseTryAgainLater:
		return "1013"
	case wire.CloseReplaced:
		return "4000"
	case wire.CloseAuthFailed:
		return "4001"
	case wire.CloseAccountDeleted:
		return "4003"
	}
	return "other"
}
