package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// FuzzDecodeNodeMessage feeds arbitrary frames through everything the
// coordinator reads of a node's message here: the envelope, then each
// payload decoder. Nothing may panic, every error must be of the
// documented kind, and what is accepted must be within its bounds.
// (node_register's rules are nodes.FuzzDecodeRegister's.)
func FuzzDecodeNodeMessage(f *testing.F) {
	seeds := []string{
		`{"msg_type":"node_register","payload":{"api_key":"gn_x","name":"n","capabilities":["echo"],"languages":["en"],"model_info":{"m":1},"max_concurrency":4}}`,
		`{"msg_type":"heartbeat","payload":{"node_id":"n","active_tasks":1,"cpu_percent":3.5}}`,
		`{"msg_type":"task_chunk","payload":{"task_id":"t","delta":"abc"}}`,
		`{"msg_type":"task_result","payload":{"task_id":"t","status":"completed","result":"r","processing_time_ms":5,"usage":{"prompt_tokens":1,"completion_tokens":2}}}`,
		`{"msg_type":"benchmark_result","payload":{"node_id":"n","results":[{"prompt":"a","response":"b","time_ms":"7","success":true},1]}}`,
		`{"msg_type":"x","payload":null}`,
		`{}`, `[]`, `null`, `{"msg_type":"task_result","payload":{"task_id":"t","status":1}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeEnvelope(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("DecodeEnvelope error of the wrong kind: %v", err)
			}
			return
		}
		if m.MsgType == "" || len(m.Payload) == 0 || m.Payload[0] != '{' {
			t.Fatalf("accepted an envelope without type or object payload: %+v", m)
		}
		check := func(err error) {
			if err != nil && !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("payload error of the wrong kind: %v", err)
			}
		}
		c, err := DecodeTaskChunk(m.Payload)
		check(err)
		if err == nil && c.TaskID == "" {
			t.Fatalf("accepted a chunk without task_id: %+v", c)
		}
		r, err := DecodeTaskResult(m.Payload)
		check(err)
		if err == nil && (r.TaskID == "" || r.ProcessingTimeMs < -1 || (r.Usage != nil && (r.Usage.PromptTokens < 0 || r.Usage.CompletionTokens < 0))) {
			t.Fatalf("accepted an invalid result: %+v", r)
		}
		hb := DecodeHeartbeat(m.Payload)
		if hb.CPUPercent < 0 || hb.CPUPercent > 100 || hb.ActiveTasks < 0 || hb.ActiveTasks > 1<<20 {
			t.Fatalf("heartbeat out of range: %+v", hb)
		}
		for _, it := range DecodeBenchmarkResult(m.Payload).Results {
			if it.TimeMs < 0 {
				t.Fatalf("benchmark item out of range: %+v", it)
			}
		}
	})
}

// FuzzParseEnvelope: whatever the coordinator sends, the SDK's reading of
// it never panics, accepts only an envelope with a type and a JSON payload,
// agrees with the coordinator's reading on every object payload, and each
// payload type the node receives decodes or fails with ErrInvalidMessage.
func FuzzParseEnvelope(f *testing.F) {
	f.Add([]byte(`{"msg_id":"1","msg_type":"task_assign","payload":{"task_id":"t","params":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`{"msg_type":"task_assign","payload":{"task_id":"t","stream":true,"resume_text":"chunk 1\n\u003c"}}`))
	f.Add([]byte(`{"msg_type":"task_assign","payload":{"task_id":"t","resume_text":7}}`))
	f.Add([]byte(`{"msg_type":"x","payload":"str"}`))
	f.Add([]byte(`{"msg_type":"error","payload":{"code":"auth_failed","message":"Invalid API key"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := ParseEnvelope(data)
		denv, derr := DecodeEnvelope(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidMessage) || derr == nil {
				t.Fatalf("ParseEnvelope(%q) = %v; DecodeEnvelope: %v", data, err, derr)
			}
			return
		}
		if env.MsgType == "" || !json.Valid(env.Payload) {
			t.Fatalf("accepted %q as %+v", data, env)
		}
		if (derr == nil) != (env.Payload[0] == '{') || (derr == nil && (denv.MsgType != env.MsgType || !bytes.Equal(denv.Payload, env.Payload))) {
			t.Fatalf("the two readings of %q differ: %+v, %v", data, denv, derr)
		}
		for _, v := range []any{&TaskAssignPayload{}, &TaskCancelPayload{}, &BenchmarkPayload{}, &ErrorPayload{}, &RegisteredPayload{}} {
			if err := env.DecodePayload(v); err != nil && !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("DecodePayload error of the wrong kind: %v", err)
			}
		}
	})
}

// FuzzParseRetryAfter: whatever close reason arrives, reading its hint
// never panics, gives only a wait of 1 ms to a day, and reads back what
// RetryAfterReason wrote.
func FuzzParseRetryAfter(f *testing.F) {
	f.Add("retry_after_ms=1500; busy")
	f.Add("retry_after_ms=99999999999999999999")
	f.Add("retry after later")
	f.Fuzz(func(t *testing.T, reason string) {
		d, ok := ParseRetryAfter(reason)
		if ok && (d < time.Millisecond || d > 24*time.Hour || d%time.Millisecond != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %v", reason, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) refused it but gave %v", reason, d)
		}
		if ok {
			if back, ok2 := ParseRetryAfter(RetryAfterReason(d, reason)); !ok2 || back != d {
				t.Fatalf("round trip of %v through %q gave %v, %v", d, RetryAfterReason(d, reason), back, ok2)
			}
		}
	})
}
