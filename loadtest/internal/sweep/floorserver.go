package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/switchyard-dev/switchyard/loadtest/internal/config"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// FloorServerArg is the first argument that runs the binary as the
// sweep's floor server (the floor mode's other process; RunFloorServer).
const FloorServerArg = "floor-server"

// The floor mode measures the least any coordinator of this protocol
// costs on the machine: the same sdk.Client and the same SDK echo nodes as
// the switchyard modes, but between them a server that only forwards. It
// runs in a process of its own (as an instance does), speaks the same
// HTTP request and node protocol (node_register, task_assign,
// task_result), and does nothing else: no accounts, limits, records,
// metrics, cluster, cancels or routing beyond taking a free slot. A
// request's latency there is what HTTP/1.1 plus one WebSocket round trip
// cost here, with JSON on both; what the local mode adds over it is
// switchyard's own.

// floorServer is that server: free slots in a channel (one entry per slot
// of every registered node, so a request that finds none waits in line for
// the next), and the requests waiting for their node's answer.
type floorServer struct {
	slots chan *floorNode

	mu      sync.Mutex
	pending map[string]chan wire.TaskResultPayload
}

// floorNode is one node's socket; wmu makes writes whole.
type floorNode struct {
	conn *websocket.Conn
	id   string
	wmu  sync.Mutex
	gone chan struct{}
}

// RunFloorServer serves until stdin closes (the parent ended), after
// printing "listening ADDR" on stdout.
func RunFloorServer(stdin io.Reader, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("floor server: %w", err)
	}
	f := &floorServer{slots: make(chan *floorNode, config.FloorMaxSlots), pending: map[string]chan wire.TaskResultPayload{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/request", f.request)
	mux.HandleFunc("GET /ws/node", f.node)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, stdin)
	return srv.Close()
}

// floorRequest is what the floor reads of POST /api/v1/request.
type floorRequest struct {
	TaskType string `json:"task_type"`
	Content  string `json:"content"`
}

// floorResult is the answer, in the shape of switchyard's (POST
// /api/v1/request in docs/PROTOCOL.md).
type floorResult struct {
	TaskID           string     `json:"task_id"`
	Status           string     `json:"status"`
	Result           string     `json:"result"`
	NodeID           string     `json:"node_id"`
	ProcessingTimeMs int64      `json:"processing_time_ms"`
	Usage            *sdk.Usage `json:"usage"`
}

func (f *floorServer) request(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		http.Error(w, `{"detail":"no api key"}`, http.StatusUnauthorized)
		return
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	var req floorRequest
	if err == nil {
		err = json.Unmarshal(b, &req)
	}
	if err != nil {
		http.Error(w, `{"detail":"bad request"}`, http.StatusUnprocessableEntity)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var n *floorNode
	for n == nil {
		select {
		case n = <-f.slots:
		case <-ctx.Done():
			http.Error(w, `{"detail":"every node is busy"}`, http.StatusServiceUnavailable)
			return
		}
		select {
		case <-n.gone: // its slots leave with it
			n = nil
		default:
		}
	}
	defer func() { f.slots <- n }()

	id := uuid.NewString()
	ch := make(chan wire.TaskResultPayload, 1)
	f.mu.Lock()
	f.pending[id] = ch
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.pending, id)
		f.mu.Unlock()
	}()
	msg, err := wire.Encode(wire.MsgTaskAssign, wire.TaskAssignPayload{TaskID: id, TaskType: req.TaskType, Content: req.Content})
	if err == nil {
		n.wmu.Lock()
		err = n.conn.Write(ctx, websocket.MessageText, msg)
		n.wmu.Unlock()
	}
	if err != nil {
		http.Error(w, `{"detail":"node gone"}`, http.StatusBadGateway)
		return
	}
	select {
	case res := <-ch:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(floorResult{TaskID: id, Status: string(res.Status), Result: res.Result,
			NodeID: n.id, ProcessingTimeMs: res.ProcessingTimeMs, Usage: res.Usage})
	case <-n.gone:
		http.Error(w, `{"detail":"node gone"}`, http.StatusBadGateway)
	case <-ctx.Done():
		http.Error(w, `{"detail":"timeout"}`, http.StatusGatewayTimeout)
	}
}

// node serves one node's socket: node_register, then task_result.
func (f *floorServer) node(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(sdk.MaxMessageBytes)
	ctx := context.Background()
	_, data, err := conn.Read(ctx)
	if err != nil {
		return
	}
	var reg wire.RegisterPayload
	env, err := wire.ParseEnvelope(data)
	if err == nil && env.MsgType != wire.MsgNodeRegister {
		err = errors.New("the first message must be node_register")
	}
	if err == nil {
		err = env.DecodePayload(&reg)
	}
	if err != nil {
		conn.Close(websocket.StatusPolicyViolation, err.Error())
		return
	}
	n := &floorNode{conn: conn, id: "floor-" + reg.Name, gone: make(chan struct{})}
	defer close(n.gone)
	ok, err := wire.Encode(wire.MsgNodeRegistered, wire.RegisteredPayload{NodeID: n.id})
	if err == nil {
		err = conn.Write(ctx, websocket.MessageText, ok)
	}
	if err != nil {
		return
	}
	for range max(reg.MaxConcurrency, 1) {
		f.slots <- n
	}
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		env, err := wire.ParseEnvelope(data)
		if err != nil || env.MsgType != wire.MsgTaskResult {
			continue // heartbeats, chunks: nothing the floor needs
		}
		var res wire.TaskResultPayload
		if env.DecodePayload(&res) != nil {
			continue
		}
		f.mu.Lock()
		ch := f.pending[res.TaskID]
		f.mu.Unlock()
		if ch != nil {
			select {
			case ch <- res:
			default:
			}
		}
	}
}
