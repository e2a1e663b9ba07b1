package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

const (
	// handshakeTimeout bounds dialing plus the node_register round trip.
	handshakeTimeout = 15 * time.Second
	// writeTimeout bounds one socket write; a write that takes longer closes
	// the connection (coder/websocket does so when the context expires).
	writeTimeout = 10 * time.Second
	// readLimit is the biggest message the coordinator sends: a task_assign
	// that resumes a stream of 1 MiB, written by JSON at up to 6 bytes a
	// character, takes more than the 4 MiB a node may send.
	readLimit = wire.MaxAssignBytes
)

// session is one connection's lifetime: from dial to close. Sessions of a
// Node never overlap: Run starts the next only after the last one returned.
type session struct {
	n      *Node
	conn   *websocket.Conn
	nodeID string
	log    *slog.Logger
	wg     sync.WaitGroup // every goroutine the session starts

	// wmu makes this the socket's only writer: messages leave whole and in
	// the order their senders took the lock (a task's chunks, then its result).
	wmu sync.Mutex

	mu    sync.Mutex
	tasks map[string]context.CancelFunc // running tasks, for task_cancel
}

// connect runs one session. registered reports whether the server accepted
// node_register; err says why the session ended (never nil).
func (n *Node) connect(ctx context.Context) (registered bool, err error) {
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	conn, _, err := websocket.Dial(hctx, n.cfg.URL, nil)
	if err != nil {
		return false, fmt.Errorf("sdk: connect to %s: %w", n.cfg.URL, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(readLimit)

	s := &session{n: n, conn: conn, log: n.log, tasks: map[string]context.CancelFunc{}}
	s.nodeID, err = s.register(hctx)
	cancel() // the handshake deadline must not outlive the handshake
	if err != nil {
		return false, err
	}
	s.log = n.log.With("node_id", s.nodeID)
	n.setNodeID(s.nodeID)
	s.log.Info("registered", "url", n.cfg.URL, "max_concurrency", n.cfg.MaxConcurrency)
	if n.cfg.OnRegistered != nil {
		n.cfg.OnRegistered(s.nodeID)
	}
	return true, s.serve(ctx)
}

// register sends node_register and waits for the server's first message,
// which must be node_registered or an error.
func (s *session) register(ctx context.Context) (string, error) {
	c := s.n.cfg
	err := s.send(wire.MsgNodeRegister, wire.RegisterPayload{
		APIKey:         c.APIKey,
		Name:           c.Name,
		Capabilities:   c.Capabilities,
		Languages:      c.Languages,
		ModelInfo:      c.ModelInfo,
		MaxConcurrency: c.MaxConcurrency,
		Version:        c.Version,
		Labels:         c.Labels,
		Features:       c.features(),
	})
	if err != nil {
		return "", fmt.Errorf("sdk: send node_register: %w", err)
	}
	_, data, err := s.conn.Read(ctx)
	if err != nil {
		return "", fmt.Errorf("sdk: waiting for node_registered: %w", err)
	}
	env, err := wire.ParseEnvelope(data)
	if err != nil {
		return "", fmt.Errorf("sdk: waiting for node_registered: %w", err)
	}
	switch env.MsgType {
	case wire.MsgNodeRegistered:
		var p wire.RegisteredPayload
		if err := env.DecodePayload(&p); err != nil {
			return "", fmt.Errorf("sdk: %w", err)
		}
		if p.NodeID == "" {
			return "", errors.New("sdk: node_registered without a node_id")
		}
		return p.NodeID, nil
	case wire.MsgError:
		var p wire.ErrorPayload
		if err := env.DecodePayload(&p); err != nil {
			return "", fmt.Errorf("sdk: %w", err)
		}
		return "", &RegistrationError{Code: p.Code, Message: p.Message}
	default:
		return "", fmt.Errorf("sdk: expected node_registered, got %q", env.MsgType)
	}
}

// serve reads messages until the connection ends, then cancels what is
// still running and waits for it. It returns why the connection ended.
func (s *session) serve(ctx context.Context) error {
	// Tasks and keepalive stop with the node (ctx) or with the connection.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	readDone := make(chan struct{})
	s.wg.Go(func() { s.keepalive(sctx) })
	s.wg.Go(func() {
		// The reader does not use ctx: cancelling a read makes coder/websocket
		// drop the socket, and a stopping node should say goodbye instead.
		select {
		case <-ctx.Done():
			s.conn.Close(websocket.StatusNormalClosure, "node stopping")
		case <-readDone:
		}
	})

	err := s.readLoop(sctx)
	close(readDone)
	cancel()
	s.conn.CloseNow()
	s.wg.Wait()
	return err
}

func (s *session) readLoop(sctx context.Context) error {
	rctx := context.WithoutCancel(sctx)
	for {
		typ, data, err := s.conn.Read(rctx)
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			s.log.Warn("ignoring a binary message")
			continue
		}
		env, err := wire.ParseEnvelope(data)
		if err != nil {
			s.log.Warn("ignoring a malformed message", "err", err)
			continue
		}
		switch env.MsgType {
		case wire.MsgTaskAssign:
			t, err := readAssign(env, s.n.cfg.Resume)
			if err == nil {
				s.startTask(sctx, t)
				continue
			}
			// A task this node cannot read (or resume) is refused at once,
			// by name when it has one: left unanswered, its client would
			// wait for the task timeout and the node would be charged with
			// a timeout.
			if id := assignTaskID(env); id != "" {
				s.log.Warn("refusing a task_assign it cannot run", "task_id", id, "err", err)
				s.wg.Go(func() { s.reject(id, err) })
				continue
			}
			s.log.Warn("ignoring a malformed task_assign", "err", err)
		case wire.MsgTaskCancel:
			var p wire.TaskCancelPayload
			if err := env.DecodePayload(&p); err != nil {
				s.log.Warn("ignoring a malformed task_cancel", "err", err)
				continue
			}
			s.cancelTask(p)
		case wire.MsgBenchmark:
			var p wire.BenchmarkPayload
			if err := env.DecodePayload(&p); err != nil {
				s.log.Warn("ignoring a malformed benchmark", "err", err)
				continue
			}
			s.wg.Go(func() { s.runBenchmark(sctx, p.Prompts) })
		case wire.MsgError:
			var p wire.ErrorPayload
			_ = env.DecodePayload(&p)
			s.log.Warn("server reported an error", "code", p.Code, "message", p.Message)
		default:
			s.log.Debug("ignoring a message", "msg_type", env.MsgType)
		}
	}
}

// keepalive sends heartbeats and pings until ctx is done. An unanswered ping
// drops the connection, which makes the reader return and Run reconnect.
func (s *session) keepalive(ctx context.Context) {
	hb := time.NewTicker(s.n.cfg.HeartbeatInterval)
	defer hb.Stop()
	ping := time.NewTicker(s.n.cfg.PingInterval)
	defer ping.Stop()
	cpu := newCPUSampler()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			err := s.send(wire.MsgHeartbeat, wire.HeartbeatPayload{
				NodeID:      s.nodeID,
				ActiveTasks: int(s.n.active.Load()),
				CPUPercent:  cpu.percent(),
			})
			if err != nil {
				s.log.Debug("heartbeat not sent", "err", err)
			}
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, s.n.cfg.PingInterval)
			err := s.conn.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Warn("server did not answer a ping; dropping the connection", "err", err)
				s.conn.CloseNow()
				return
			}
		}
	}
}

// errTooLarge is returned for a message over the server's size limit; sending
// it would make the server close the connection with 1009.
var errTooLarge = errors.New("sdk: message exceeds the server's 4 MiB limit")

// send writes one message. It is the only way anything reaches the socket.
func (s *session) send(msgType wire.MsgType, payload any) error {
	data, err := wire.Encode(msgType, payload)
	if err != nil {
		return err
	}
	if len(data) > wire.MaxMessageBytes {
		return fmt.Errorf("%w (%s of %d bytes)", errTooLarge, msgType, len(data))
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return s.conn.Write(ctx, websocket.MessageText, data)
}

// closeStatus is the close code in err, or -1.
func closeStatus(err error) int {
	return int(websocket.CloseStatus(err))
}
