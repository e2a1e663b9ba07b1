package wire

import (
	"bytes"
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
	// Raw fields, read one by one: a field of type any would decode
	// whatever a node put there into a tree of Go values, 20 to 100
	// bytes for each 2 or 3 of a hostile list (TestNodeFrameReadingsAreBounded).
	var raw struct {
		TaskID           json.RawMessage `json:"task_id"`
		Status           json.RawMessage `json:"status"`
		Result           json.RawMessage `json:"result"`
		ProcessingTimeMs json.RawMessage `json:"processing_time_ms"`
		Usage            json.RawMessage `json:"usage"`
	}
	var r TaskResultPayload
	if err := cd.unmarshal(p, &raw); err != nil {
		return r, fmt.Errorf("%w: task_result: %s", ErrInvalidMessage, DescribeJSONError(err))
	}
	id, ok := cd.str(raw.TaskID)
	if !ok || id == "" {
		return r, fmt.Errorf("%w: task_result: task_id must be a non-empty string", ErrInvalidMessage)
	}
	r.TaskID = id
	status, ok := cd.str(raw.Status)
	if !ok {
		return r, fmt.Errorf("%w: task_result: status must be a string", ErrInvalidMessage)
	}
	r.Status = ResultStatus(status)
	if len(raw.Result) > 0 && string(raw.Result) != "null" {
		if r.Result, ok = cd.str(raw.Result); !ok {
			return r, fmt.Errorf("%w: task_result: result must be a string", ErrInvalidMessage)
		}
	}
	r.ProcessingTimeMs = -1
	if len(raw.ProcessingTimeMs) > 0 && string(raw.ProcessingTimeMs) != "null" {
		r.ProcessingTimeMs = int64(min(cd.number(raw.ProcessingTimeMs), math.MaxInt32))
	}
	if len(raw.Usage) > 0 && raw.Usage[0] == '{' {
		var u struct {
			PromptTokens     json.RawMessage `json:"prompt_tokens"`
			CompletionTokens json.RawMessage `json:"completion_tokens"`
		}
		_ = cd.unmarshal(raw.Usage, &u) // an object that decoded once decodes again
		r.Usage = &Usage{
			PromptTokens:     int(min(cd.number(u.PromptTokens), math.MaxInt32)),
			CompletionTokens: int(min(cd.number(u.CompletionTokens), math.MaxInt32)),
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
		ActiveTasks json.RawMessage `json:"active_tasks"`
		CPUPercent  json.RawMessage `json:"cpu_percent"`
	}
	_ = json.Unmarshal(p, &raw) // lenient by design
	return HeartbeatPayload{
		ActiveTasks: int(min(Standard.number(raw.ActiveTasks), 1<<20)),
		CPUPercent:  min(max(Standard.number(raw.CPUPercent), 0), 100),
	}
}

// Bounds of a benchmark_result's reading: its first MaxBenchmarkItems
// items are read (the coordinator asks fewer questions, and keeps 500
// characters of each answer), and a payload over MaxBenchmarkBytes is
// not read at all: it reads as no results, a failed benchmark.
const (
	MaxBenchmarkItems = 16
	MaxBenchmarkBytes = 64 << 10
)

// DecodeBenchmarkResult reads a benchmark_result leniently: a payload that
// cannot be read has no results, and a field of an item that cannot be read
// is zero (so an unreadable item is a failed answer). time_ms is a number or
// a numeric string, clamped to [0, 2^31-1]. NodeID is not read.
func DecodeBenchmarkResult(p json.RawMessage) BenchmarkResultPayload {
	var raw struct {
		Results json.RawMessage `json:"results"`
	}
	var out BenchmarkResultPayload
	if len(p) > MaxBenchmarkBytes || json.Unmarshal(p, &raw) != nil || len(raw.Results) == 0 || raw.Results[0] != '[' {
		return out // lenient by design
	}
	dec := json.NewDecoder(bytes.NewReader(raw.Results))
	_, _ = dec.Token() // '['
	for dec.More() && len(out.Results) < MaxBenchmarkItems {
		var item struct {
			Prompt   json.RawMessage `json:"prompt"`
			Response json.RawMessage `json:"response"`
			TimeMs   json.RawMessage `json:"time_ms"`
			Success  json.RawMessage `json:"success"`
		}
		var it BenchmarkItem
		// An item that is not an object is a type error, after which the
		// Decoder goes on with the next item; any other error ends it.
		var te *json.UnmarshalTypeError
		if err := dec.Decode(&item); err != nil && !errors.As(err, &te) {
			break
		} else if err == nil {
			it.Prompt, _ = Standard.str(item.Prompt)
			it.Response, _ = Standard.str(item.Response)
			it.Success = string(item.Success) == "true"
			it.TimeMs = int64(min(Standard.number(item.TimeMs), math.MaxInt32))
		}
		out.Results = append(out.Results, it)
	}
	return out
}

// str reads a JSON string; ok is false for any other value.
func (cd Codec) str(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || cd.unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// maxNumberBytes is the longest number or numeric string number reads;
// a float64 needs 24 characters at most, and the fields it reads are
// counts and milliseconds.
const maxNumberBytes = 64

// number reads a JSON number or numeric string leniently: anything else,
// anything longer than maxNumberBytes, and NaN, infinities and negatives,
// read as 0.
func (cd Codec) number(raw json.RawMessage) float64 {
	var f float64
	switch {
	case len(raw) == 0 || len(raw) > maxNumberBytes:
	case raw[0] == '"':
		s, _ := cd.str(raw)
		f, _ = strconv.ParseFloat(s, 64)
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		var err error
		if f, err = strconv.ParseFloat(string(raw), 64); err != nil {
			f = 0 // past a float64's range too (encoding/json refused the whole payload)
		}
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
