package nodes

import (
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// BenchmarkMsgpackFrames is what a msgpack node subprotocol would cost the
// coordinator per task, with msgpack v5 (a core dependency): the frames of
// BenchmarkReadNodeResult and BenchmarkEncodeAssign (same fields, same
// values), an envelope around a payload as in JSON. Measured to decide
// whether to build one (docs/BENCHMARKS.md, "A msgpack node
// subprotocol, measured first").
func BenchmarkMsgpackFrames(b *testing.B) {
	type envelope struct {
		MsgID     string             `msgpack:"msg_id"`
		MsgType   wire.MsgType       `msgpack:"msg_type"`
		Payload   msgpack.RawMessage `msgpack:"payload"`
		SenderID  string             `msgpack:"sender_id"`
		Timestamp string             `msgpack:"timestamp"`
	}
	type usage struct {
		PromptTokens     int `msgpack:"prompt_tokens"`
		CompletionTokens int `msgpack:"completion_tokens"`
	}
	type result struct {
		TaskID           string `msgpack:"task_id"`
		Status           string `msgpack:"status"`
		Result           string `msgpack:"result"`
		ProcessingTimeMs int64  `msgpack:"processing_time_ms"`
		Usage            *usage `msgpack:"usage"`
	}
	type assign struct {
		TaskID   string             `msgpack:"task_id"`
		TaskType string             `msgpack:"task_type"`
		Content  string             `msgpack:"content"`
		Params   msgpack.RawMessage `msgpack:"params"`
		Stream   bool               `msgpack:"stream"`
	}
	must := func(p []byte, err error) []byte {
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	payload := must(msgpack.Marshal(result{TaskID: "0b7d8f7e-2c57-4d4b-8f3c-0e6a2b8e9d11", Status: "completed",
		Result: "hello from the echo node", Usage: &usage{12, 5}}))
	frame := must(msgpack.Marshal(envelope{MsgID: "6f1c2a34-6f0e-4c4e-9a55-1c0d2d3c4b5a", MsgType: wire.MsgTaskResult,
		Payload: payload, SenderID: "node-12", Timestamp: "2026-12-06T03:00:00.000000Z"}))
	b.Run("read_result", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e envelope
			if err := msgpack.Unmarshal(frame, &e); err != nil {
				b.Fatal(err)
			}
			var r result
			if err := msgpack.Unmarshal(e.Payload, &r); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(frame)), "frame_bytes") // JSON's: len(resultFrame)
	})
	p := assign{TaskID: "0b7d8f7e-2c57-4d4b-8f3c-0e6a2b8e9d11", TaskType: "echo",
		Content: "hello world, a prompt of some length", Params: must(msgpack.Marshal(map[string]int{"max_tokens": 16}))}
	b.Run("encode_assign", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pl := must(msgpack.Marshal(p))
			must(msgpack.Marshal(envelope{MsgID: "6f1c2a34-6f0e-4c4e-9a55-1c0d2d3c4b5a", MsgType: wire.MsgTaskAssign,
				Payload: pl, SenderID: "coordinator", Timestamp: time.Now().UTC().Format(time.RFC3339Nano)}))
		}
	})
}
