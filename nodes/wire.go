package nodes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Message types of the node protocol (GEMMANET-WIRE §1), and ours.
const (
	MsgNodeRegister    = "node_register"
	MsgNodeRegistered  = "node_registered"
	MsgHeartbeat       = "heartbeat"
	MsgTaskAssign      = "task_assign"
	MsgTaskChunk       = "task_chunk"
	MsgTaskResult      = "task_result"
	MsgTaskCancel      = "task_cancel" // ours: only to nodes that declared FeatureTaskCancel (GemmaNet's SDK cannot parse it)
	MsgBenchmark       = "benchmark"
	MsgBenchmarkResult = "benchmark_result"
	MsgError           = "error"
)

// Error codes sent to nodes in an `error` message.
const (
	CodeInvalidRegistration = "invalid_registration"
	CodeAuthFailed          = "auth_failed"
	CodeTooManyNodes        = "too_many_nodes"
	CodeInvalidMessage      = "invalid_message"
	CodeUnexpectedMessage   = "unexpected_message"
	CodeUnavailable         = "unavailable"
)

// ErrInvalidMessage wraps every decoding failure of a node message.
var ErrInvalidMessage = errors.New("invalid message")

// Message is the envelope every node message travels in. Only msg_type is
// required; unknown fields are ignored.
type Message struct {
	MsgID     string          `json:"msg_id"`
	MsgType   string          `json:"msg_type"`
	Payload   json.RawMessage `json:"payload"`
	SenderID  string          `json:"sender_id"`
	Timestamp string          `json:"timestamp"`
}

// DecodeMessage parses one text frame from a node. The payload must be a
// JSON object (absent or null reads as {}); it is decoded later, by type.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, fmt.Errorf("%w: not a JSON envelope: %s", ErrInvalidMessage, jsonErr(err))
	}
	if m.MsgType == "" {
		return Message{}, fmt.Errorf("%w: msg_type is missing", ErrInvalidMessage)
	}
	p := bytes.TrimSpace(m.Payload)
	switch {
	case len(p) == 0 || bytes.Equal(p, []byte("null")):
		m.Payload = json.RawMessage("{}")
	case p[0] != '{':
		return Message{}, fmt.Errorf("%w: payload must be an object", ErrInvalidMessage)
	}
	return m, nil
}

// jsonErr shortens encoding/json errors to what a node developer needs.
func jsonErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s must be %s, not %s", te.Field, typeName(te.Type.Kind().String()), te.Value)
		}
		return fmt.Sprintf("expected %s, got %s", typeName(te.Type.Kind().String()), te.Value)
	}
	return err.Error()
}

func typeName(kind string) string {
	switch kind {
	case "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	case "int", "int32", "int64", "uint32", "uint64", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	}
	return "a " + kind
}

// ChunkPayload is a task_chunk.
type ChunkPayload struct {
	TaskID string `json:"task_id"`
	Delta  string `json:"delta"`
}

// DecodeChunk decodes and checks a task_chunk payload.
func DecodeChunk(p json.RawMessage) (ChunkPayload, error) {
	var c ChunkPayload
	if err := json.Unmarshal(p, &c); err != nil {
		return c, fmt.Errorf("%w: task_chunk: %s", ErrInvalidMessage, jsonErr(err))
	}
	if c.TaskID == "" {
		return c, fmt.Errorf("%w: task_chunk: task_id is missing", ErrInvalidMessage)
	}
	return c, nil
}

// ResultPayload is a task_result. Status "completed" is success; anything
// else is a handler failure.
type ResultPayload struct {
	TaskID       string
	Status       string
	Result       string
	ProcessingMs int64 // -1 when absent: the requester then uses its own measurement
	HasUsage     bool
	PromptTokens int64
	OutputTokens int64
}

// DecodeResult decodes a task_result. The informational fields
// (processing_time_ms, usage) are read leniently; status and result must be
// strings. When the payload is bad but names a task, the returned payload
// carries that TaskID with the error, so the caller can fail the task at
// once instead of leaving its client waiting.
func DecodeResult(p json.RawMessage) (ResultPayload, error) {
	var raw struct {
		TaskID           any `json:"task_id"`
		Status           any `json:"status"`
		Result           any `json:"result"`
		ProcessingTimeMs any `json:"processing_time_ms"`
		Usage            any `json:"usage"`
	}
	var r ResultPayload
	if err := json.Unmarshal(p, &raw); err != nil {
		return r, fmt.Errorf("%w: task_result: %s", ErrInvalidMessage, jsonErr(err))
	}
	id, ok := raw.TaskID.(string)
	if !ok || id == "" {
		return r, fmt.Errorf("%w: task_result: task_id must be a non-empty string", ErrInvalidMessage)
	}
	r.TaskID = id
	if r.Status, ok = raw.Status.(string); !ok {
		return r, fmt.Errorf("%w: task_result: status must be a string", ErrInvalidMessage)
	}
	switch v := raw.Result.(type) {
	case string:
		r.Result = v
	case nil:
	default:
		return r, fmt.Errorf("%w: task_result: result must be a string", ErrInvalidMessage)
	}
	r.ProcessingMs = -1
	if raw.ProcessingTimeMs != nil {
		r.ProcessingMs = int64(min(number(raw.ProcessingTimeMs), math.MaxInt32))
	}
	if u, ok := raw.Usage.(map[string]any); ok {
		r.HasUsage = true
		r.PromptTokens = int64(min(number(u["prompt_tokens"]), math.MaxInt32))
		r.OutputTokens = int64(min(number(u["completion_tokens"]), math.MaxInt32))
	}
	return r, nil
}

// Heartbeat is the load a node reports. Values are clamped, never refused:
// a heartbeat only informs routing.
type Heartbeat struct {
	ActiveTasks int
	CPUPercent  float64
}

// DecodeHeartbeat reads a heartbeat leniently, as GemmaNet does: a field of
// the wrong type reads as 0.
func DecodeHeartbeat(p json.RawMessage) Heartbeat {
	var raw struct {
		ActiveTasks any `json:"active_tasks"`
		CPUPercent  any `json:"cpu_percent"`
	}
	_ = json.Unmarshal(p, &raw) // lenient by design
	hb := Heartbeat{ActiveTasks: int(min(number(raw.ActiveTasks), 1<<20)), CPUPercent: number(raw.CPUPercent)}
	hb.CPUPercent = min(max(hb.CPUPercent, 0), 100)
	return hb
}

func number(v any) float64 {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case string:
		f, _ = strconv.ParseFloat(x, 64)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0
	}
	return f
}

// outMessage is a server → node envelope.
type outMessage struct {
	MsgID     string `json:"msg_id"`
	MsgType   string `json:"msg_type"`
	Payload   any    `json:"payload"`
	SenderID  string `json:"sender_id"`
	Timestamp string `json:"timestamp"`
}

// Encode builds a server → node message. payload must marshal to an object.
func Encode(msgType string, payload any) []byte {
	b, err := json.Marshal(outMessage{
		MsgID:     uuid.NewString(),
		MsgType:   msgType,
		Payload:   payload,
		Timestamp: time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
	})
	if err != nil {
		// Only our own payload types reach here; failing to marshal one is a bug.
		panic(fmt.Sprintf("nodes: encode %s: %v", msgType, err))
	}
	return b
}

// ErrorPayload is the payload of an `error` message.
type ErrorPayload struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// AssignPayload is a task_assign. Params is the client's JSON object, passed through.
type AssignPayload struct {
	TaskID   string          `json:"task_id"`
	TaskType string          `json:"task_type"`
	Content  string          `json:"content"`
	Params   json.RawMessage `json:"params"`
	Stream   bool            `json:"stream"`
}

// CancelPayload is our task_cancel.
type CancelPayload struct {
	TaskID string `json:"task_id"`
	Reason string `json:"reason"`
}
