package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeTaskChunk(t *testing.T) {
	c, err := DecodeTaskChunk(json.RawMessage(`{"task_id":"t","delta":"d","extra":1}`))
	if err != nil || c != (TaskChunkPayload{TaskID: "t", Delta: "d"}) {
		t.Fatalf("got %+v, %v", c, err)
	}
	for in, want := range map[string]string{
		`{"delta":"d"}`:             "task_chunk: task_id is missing",
		`{"task_id":"t","delta":1}`: "task_chunk: delta must be a string, not number",
	} {
		if _, err := DecodeTaskChunk(json.RawMessage(in)); !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeTaskChunk(%s) = %v; want an error containing %q", in, err, want)
		}
	}
}

func TestDecodeTaskResult(t *testing.T) {
	r, err := DecodeTaskResult(json.RawMessage(`{"task_id":"t","node_id":"n","status":"completed","result":"ok","processing_time_ms":12.7,"usage":{"prompt_tokens":3,"completion_tokens":"4"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.TaskID != "t" || r.Status != StatusCompleted || r.Result != "ok" || r.ProcessingTimeMs != 12 || r.Usage == nil || *r.Usage != (Usage{PromptTokens: 3, CompletionTokens: 4}) {
		t.Fatalf("got %+v", r)
	}
	r, err = DecodeTaskResult(json.RawMessage(`{"task_id":"t","status":"failed","result":null,"usage":null}`))
	if err != nil || r.ProcessingTimeMs != -1 || r.Usage != nil || r.Result != "" {
		t.Fatalf("missing optional fields: %+v, %v", r, err)
	}
	r, err = DecodeTaskResult(json.RawMessage(`{"task_id":"t","status":"completed","processing_time_ms":1e300,"usage":{"prompt_tokens":-3,"completion_tokens":[1]}}`))
	if err != nil || r.ProcessingTimeMs != 1<<31-1 || *r.Usage != (Usage{}) {
		t.Fatalf("out of range: %+v, %v", r, err)
	}
	r, err = DecodeTaskResult(json.RawMessage(`{"task_id":"t","status":"completed","result":{"not":"a string"}}`))
	if err == nil || r.TaskID != "t" {
		t.Fatalf("a non-string result must fail and still name its task: %+v, %v", r, err)
	}
	for _, bad := range []string{`{"status":"completed"}`, `{"task_id":5,"status":"completed"}`, `{"task_id":"t","status":3}`, `[]`} {
		if _, err := DecodeTaskResult(json.RawMessage(bad)); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("DecodeTaskResult(%s) = %v; want ErrInvalidMessage", bad, err)
		}
	}
}

func TestDecodeHeartbeatClamps(t *testing.T) {
	for in, want := range map[string]HeartbeatPayload{
		`{"active_tasks":2,"cpu_percent":55.5}`:   {ActiveTasks: 2, CPUPercent: 55.5},
		`{"active_tasks":-3,"cpu_percent":250}`:   {ActiveTasks: 0, CPUPercent: 100},
		`{"active_tasks":"x","cpu_percent":"12"}`: {ActiveTasks: 0, CPUPercent: 12},
		`{"active_tasks":1e12,"node_id":"n"}`:     {ActiveTasks: 1 << 20},
		`{"cpu_percent":[1]}`:                     {},
		`{"cpu_percent":1e999}`:                   {},
	} {
		if got := DecodeHeartbeat(json.RawMessage(in)); got != want {
			t.Errorf("DecodeHeartbeat(%s) = %+v; want %+v", in, got, want)
		}
	}
}

func TestDecodeBenchmarkResult(t *testing.T) {
	got := DecodeBenchmarkResult(json.RawMessage(`{"node_id":"n","results":[{"prompt":"a","response":"b","time_ms":"5","success":true},{"prompt":7,"success":"yes","time_ms":-1},1]}`))
	want := []BenchmarkItem{{Prompt: "a", Response: "b", TimeMs: 5, Success: true}, {}, {}}
	if len(got.Results) != len(want) || got.NodeID != "" {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got.Results[i] != want[i] {
			t.Errorf("item %d = %+v; want %+v", i, got.Results[i], want[i])
		}
	}
	for _, in := range []string{`garbage`, `{"results":null}`, `{}`} {
		if r := DecodeBenchmarkResult(json.RawMessage(in)); len(r.Results) != 0 {
			t.Errorf("DecodeBenchmarkResult(%s) = %+v", in, r)
		}
	}
}

// benchFrames are what a node sends most: results and chunks, with a
// heartbeat now and then.
var benchFrames = [][]byte{
	[]byte(`{"msg_id":"7d1f7c36-0f6b-4a53-9a43-2f1c4cbb6d1e","msg_type":"task_result","payload":{"task_id":"0b8f3a52-3d4e-4bb1-8f2a-0c6f1f1d9e77","node_id":"5e0f1b2a-7c3d-5e4f-8a9b-0c1d2e3f4a5b","status":"completed","result":"echo: hello","processing_time_ms":1,"usage":{"prompt_tokens":2,"completion_tokens":3}},"sender_id":"","timestamp":"2026-01-01T00:00:00.000000Z"}`),
	[]byte(`{"msg_id":"7d1f7c36-0f6b-4a53-9a43-2f1c4cbb6d1e","msg_type":"task_chunk","payload":{"task_id":"0b8f3a52-3d4e-4bb1-8f2a-0c6f1f1d9e77","delta":"hello "},"sender_id":"","timestamp":"2026-01-01T00:00:00.000000Z"}`),
	[]byte(`{"msg_id":"7d1f7c36-0f6b-4a53-9a43-2f1c4cbb6d1e","msg_type":"heartbeat","payload":{"node_id":"5e0f1b2a-7c3d-5e4f-8a9b-0c1d2e3f4a5b","active_tasks":3,"cpu_percent":41.5},"sender_id":"","timestamp":"2026-01-01T00:00:00.000000Z"}`),
}

// BenchmarkDecodeNodeMessage is the coordinator's reading of a node's
// message on the hot path: the envelope, then the payload by type.
func BenchmarkDecodeNodeMessage(b *testing.B) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m, err := DecodeEnvelope(benchFrames[i%len(benchFrames)])
		if err != nil {
			b.Fatal(err)
		}
		switch m.MsgType {
		case MsgTaskResult:
			_, err = DecodeTaskResult(m.Payload)
		case MsgTaskChunk:
			_, err = DecodeTaskChunk(m.Payload)
		case MsgHeartbeat:
			_ = DecodeHeartbeat(m.Payload)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeAssign is the coordinator's encoding of a task_assign,
// once per task.
func BenchmarkEncodeAssign(b *testing.B) {
	b.ReportAllocs()
	p := TaskAssignPayload{TaskID: "0b8f3a52-3d4e-4bb1-8f2a-0c6f1f1d9e77", TaskType: "echo", Content: "hello", Params: json.RawMessage(`{"temperature":0.2}`)}
	for b.Loop() {
		MustEncode(MsgTaskAssign, p)
	}
}
