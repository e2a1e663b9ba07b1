package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The coordinator's readings of the payloads nodes send. Each error wraps
// ErrInvalidMessage and its text is sent to the node, so it names the field
// and the rule.

// Codec encodes and reads messages with one JSON implementation.
// Standard's is encoding/json, and the package's functions use it; the
// coordinator encodes and reads the messages of every task with a faster
// implementation of the same reading and writing (nodes.Wire, held to
// Standard's by its fuzz tests), which this package, imported by third
// parties through sdk, does not import.
type Codec struct {
	marshal   func(v any) ([]byte, error)
	unmarshal func(data []byte, v any) error
}

// Standard encodes and reads with encoding/json.
var Standard = Codec{marshal: json.Marshal, unmarshal: json.Unmarshal}

// NewCodec returns a Codec that encodes with marshal and decodes with
// unmarshal, which must write and read JSON as encoding/json's Marshal and
// Unmarshal do wherever they succeed. An unmarshal error is only described
// (DescribeJSONError), so a caller that wants encoding/json's wording reads
// a refused message again with Standard.
func NewCodec(marshal func(v any) ([]byte, error), unmarshal func(data []byte, v any) error) Codec {
	return Codec{marshal: marshal, unmarshal: unmarshal}
}

// DecodeTaskChunk decodes a task_chunk; task_id is required.
func DecodeTaskChunk(p json.RawMessage) (TaskChunkPayload, error) {
	return Standard.DecodeTaskChunk(p)
}

// DecodeTaskChunk is the package's DecodeTaskChunk with cd's JSON decoder.
func (cd Codec) DecodeTaskChunk(p json.RawMessage) (TaskChunkPayload, error) {
	var c TaskChunkPayload
	if err := cd.unmarshal(p, &c); err != nil {
		return c, fmt.Errorf("%w: task_chunk: %s", ErrInvalidMessage, DescribeJSONError(err))
	}
	if c.TaskID == "" {
		return c, fmt.Errorf("%w: task_chunk: task_id is missing", ErrInvalidMessage)
	}
	return c, nil
}

// DecodeTaskResult decodes a task_result. task_id must be a non-empty
// string, status a string, result a string or null. The informational
// fields are read leniently, as GemmaNet's nodes send them: a number or a
// numeric string, clamped to [0, 2^31-1]; an absent processing_time_ms is
// -1, a usage that is not an object nil. When the payload is bad but names
// a task, the returned payload carries that TaskID with the error, so the
// caller can fail the task at once instead of leaving its client waiting.
// NodeID is not read.
func DecodeTaskResult(p json.RawMessage) (TaskResultPayload, error) {
	return Standard.DecodeTaskResult(p)
}

// DecodeTaskResult is the package's DecodeTaskResult with cd's JSON
// decoder.
func (cd Codec) DecodeTaskResult(p json.RawMessage) (TaskResultPayload, error) {
	var raw struct {
		TaskID           any `json:"task_id"`
		Status           any `json:"status"`
		Result           any `json:"result"`
		ProcessingTimeMs any `json:"processing_time_ms"`
		Usage            any `json:"usage"`
	}
	var r TaskResultPayload
	if err := cd.unmarshal(p, &raw); err != nil {
		return r, fmt.Errorf("%w: task_result: %s", ErrInvalidMessage, DescribeJSONError(err))
	}
	id, ok := raw.TaskID.(string)
	if !ok || id == "" {
		return r, fmt.Errorf("%w: task_result: task_id must be a non-empty string", ErrInvalidMessage)
	}
	r.TaskID = id
	status, ok := raw.Status.(string)
	if !ok {
		return r, fmt.Errorf("%w: task_result: status must be a string", ErrInvalidMessage)
	}
	r.Status = ResultStatus(status)
	switch v := raw.Result.(type) {
	case string:
		r.Result = v
	case nil:
	default:
		return r, fmt.Errorf("%w: task_result: result must be a string", ErrInvalidMessage)
	}
	r.ProcessingTimeMs = -1
	if raw.ProcessingTimeMs != nil {
		r.ProcessingTimeMs = int64(min(number(raw.ProcessingTimeMs), math.MaxInt32))
	}
	if u, ok := raw.Usage.(map[string]any); ok {
		r.Usage = &Usage{
			PromptTokens:     int(min(number(u["prompt_tokens"]), math.MaxInt32)),
			CompletionTokens: int(min(number(u["completion_tokens"]), math.MaxInt32)),
		}
	}
	return r, nil
}

// DecodeHeartbeat reads a heartbeat leniently, as GemmaNet does: a field of
// the wrong type reads as 0. Values are clamped (active_tasks to 2^20,
// cpu_percent to [0, 100]), never refused: a heartbeat only informs
// routing. NodeID is not read.
func DecodeHeartbeat(p json.RawMessage) HeartbeatPayload {
	var raw struct {
		ActiveTasks any `json:"active_tasks"`
		CPUPercent  any `json:"cpu_percent"`
	}
	_ = json.Unmarshal(p, &raw) // lenient by design
	return HeartbeatPayload{
		ActiveTasks: int(min(number(raw.ActiveTasks), 1<<20)),
		CPUPercent:  min(max(number(raw.CPUPercent), 0), 100),
	}
}

// DecodeBenchmarkResult reads a benchmark_result leniently: a payload that
// cannot be read has no results, and a field of an item that cannot be read
// is zero (so an unreadable item is a failed answer). time_ms is a number or
// a numeric string, clamped to [0, 2^31-1]. NodeID is not read.
func DecodeBenchmarkResult(p json.RawMessage) BenchmarkResultPayload {
	var raw struct {
		Results []map[string]any `json:"results"`
	}
	_ = json.Unmarshal(p, &raw) // lenient by design
	var out BenchmarkResultPayload
	if len(raw.Results) > 0 {
		out.Results = make([]BenchmarkItem, len(raw.Results))
	}
	for i, r := range raw.Results {
		prompt, _ := r["prompt"].(string)
		response, _ := r["response"].(string)
		success, _ := r["success"].(bool)
		out.Results[i] = BenchmarkItem{
			Prompt: prompt, Response: response, Success: success,
			TimeMs: int64(min(number(r["time_ms"]), math.MaxInt32)),
		}
	}
	return out
}

// number reads a JSON number or numeric string leniently: anything else,
// and NaN, infinities and negatives, read as 0.
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

// DescribeJSONError says what an encoding/json decoding error means in a
// node developer's terms ("capabilities must be an array, not string",
// "syntax error at byte 12"), for the error message sent back to the node.
func DescribeJSONError(err error) string {
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
