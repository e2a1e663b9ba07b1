package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Message types on the node WebSocket (GEMMANET-WIRE.md §1).
const (
	MsgNodeRegister    = "node_register"    // node → server, first message
	MsgNodeRegistered  = "node_registered"  // server → node, first reply
	MsgError           = "error"            // server → node
	MsgHeartbeat       = "heartbeat"        // node → server
	MsgTaskAssign      = "task_assign"      // server → node
	MsgTaskChunk       = "task_chunk"       // node → server
	MsgTaskResult      = "task_result"      // node → server
	MsgTaskCancel      = "task_cancel"      // server → node (switchyard extension)
	MsgBenchmark       = "benchmark"        // server → node
	MsgBenchmarkResult = "benchmark_result" // node → server
)

// FeatureTaskCancel is what a node lists in node_register's features
// (switchyard extension) to say it understands task_cancel; switchyard
// sends task_cancel to no other node. The Node declares it.
const FeatureTaskCancel = "task_cancel"

// Close codes the server uses on the node WebSocket beyond the standard ones.
const (
	CloseReplaced       = 4000 // a newer connection of the same identity took over
	CloseAuthFailed     = 4001
	CloseAccountDeleted = 4003
)

// Task result statuses. Anything but completed fails the task.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed" // the handler failed (or panicked); result is its message
	// StatusRejected (switchyard extension) says the node could not read the
	// task_assign (a params value it cannot decode, say): the request's
	// fault, not the handler's. result says why.
	StatusRejected = "rejected"
)

// MaxMessageBytes is the largest message the server accepts on the node
// WebSocket; a bigger one makes it close the connection with 1009.
const MaxMessageBytes = 4 << 20

// Envelope is the frame every node WebSocket message travels in.
type Envelope struct {
	MsgID     string          `json:"msg_id"`
	MsgType   string          `json:"msg_type"`
	Payload   json.RawMessage `json:"payload"`
	SenderID  string          `json:"sender_id"`
	Timestamp string          `json:"timestamp"`
}

// timestampLayout is ISO-8601 in UTC with a Z, microseconds like Python's isoformat.
const timestampLayout = "2006-01-02T15:04:05.000000Z07:00"

// MarshalEnvelope encodes payload in a fresh envelope of type msgType.
func MarshalEnvelope(msgType string, payload any) ([]byte, error) {
	p, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("sdk: encode %s payload: %w", msgType, err)
	}
	return json.Marshal(Envelope{
		MsgID:     uuid.NewString(),
		MsgType:   msgType,
		Payload:   p,
		SenderID:  "",
		Timestamp: time.Now().UTC().Format(timestampLayout),
	})
}

// errNoMsgType is returned by ParseEnvelope for a frame without msg_type.
var errNoMsgType = errors.New("sdk: envelope has no msg_type")

// ParseEnvelope decodes one frame. Only msg_type is required; a missing or
// null payload becomes {} so that DecodePayload always has an object.
func ParseEnvelope(data []byte) (Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(data, &e); err != nil {
		return Envelope{}, fmt.Errorf("sdk: decode envelope: %w", err)
	}
	if e.MsgType == "" {
		return Envelope{}, errNoMsgType
	}
	if len(e.Payload) == 0 || string(e.Payload) == "null" {
		e.Payload = json.RawMessage("{}")
	}
	return e, nil
}

// DecodePayload decodes the envelope's payload into v.
func (e Envelope) DecodePayload(v any) error {
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("sdk: decode %s payload: %w", e.MsgType, err)
	}
	return nil
}

// RegisterPayload is node_register.
type RegisterPayload struct {
	APIKey       string         `json:"api_key"`
	Name         string         `json:"name"`
	Capabilities []string       `json:"capabilities"`
	Languages    []string       `json:"languages"`
	ModelInfo    map[string]any `json:"model_info"`
	// MaxConcurrency is switchyard's extension; GemmaNet ignores it.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Features are the protocol extensions the node understands
	// (switchyard's; GemmaNet ignores them), such as FeatureTaskCancel.
	Features []string `json:"features,omitempty"`
}

// RegisteredPayload is node_registered.
type RegisteredPayload struct {
	NodeID string `json:"node_id"`
}

// ErrorPayload is the server's error message.
type ErrorPayload struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// HeartbeatPayload is heartbeat.
type HeartbeatPayload struct {
	NodeID      string  `json:"node_id"`
	ActiveTasks int     `json:"active_tasks"`
	CPUPercent  float64 `json:"cpu_percent"`
}

// TaskAssignPayload is task_assign.
type TaskAssignPayload struct {
	TaskID   string         `json:"task_id"`
	TaskType string         `json:"task_type"`
	Content  string         `json:"content"`
	Params   map[string]any `json:"params"`
	Stream   bool           `json:"stream"`
}

// TaskChunkPayload is task_chunk.
type TaskChunkPayload struct {
	TaskID string `json:"task_id"`
	Delta  string `json:"delta"`
}

// TaskResultPayload is task_result. Usage is null when the handler reports none.
type TaskResultPayload struct {
	TaskID           string `json:"task_id"`
	NodeID           string `json:"node_id"`
	Status           string `json:"status"`
	Result           string `json:"result"`
	ProcessingTimeMs int64  `json:"processing_time_ms"`
	Usage            *Usage `json:"usage"`
}

// TaskCancelPayload is task_cancel (switchyard extension).
type TaskCancelPayload struct {
	TaskID string `json:"task_id"`
	Reason string `json:"reason"`
}

// BenchmarkPayload is benchmark.
type BenchmarkPayload struct {
	Prompts []string `json:"prompts"`
}

// BenchmarkResultPayload is benchmark_result.
type BenchmarkResultPayload struct {
	NodeID  string          `json:"node_id"`
	Results []BenchmarkItem `json:"results"`
}

// BenchmarkItem is the outcome of one benchmark prompt.
type BenchmarkItem struct {
	Prompt   string `json:"prompt"`
	Response string `json:"response"`
	TimeMs   int64  `json:"time_ms"`
	Success  bool   `json:"success"`
}

// Usage is the token count a handler may report; it reaches the API client
// unchanged.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}
