package nodes

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// FuzzDecodeNodeMessage feeds arbitrary frames through everything a node
// message passes on its way in. Nothing may panic, and every error must be
// of the documented kind.
func FuzzDecodeNodeMessage(f *testing.F) {
	seeds := []string{
		`{"msg_type":"node_register","payload":{"api_key":"gn_x","name":"n","capabilities":["echo"],"languages":["en"],"model_info":{"m":1},"max_concurrency":4}}`,
		`{"msg_type":"heartbeat","payload":{"node_id":"n","active_tasks":1,"cpu_percent":3.5}}`,
		`{"msg_type":"task_chunk","payload":{"task_id":"t","delta":"abc"}}`,
		`{"msg_type":"task_result","payload":{"task_id":"t","status":"completed","result":"r","processing_time_ms":5,"usage":{"prompt_tokens":1,"completion_tokens":2}}}`,
		`{"msg_type":"benchmark_result","payload":{"node_id":"n","results":[]}}`,
		`{"msg_type":"x","payload":null}`,
		`{}`, `[]`, `null`, `{"msg_type":"task_result","payload":{"task_id":"t","status":1}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := wire.DecodeEnvelope(b)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidMessage) {
				t.Fatalf("DecodeEnvelope error of the wrong kind: %v", err)
			}
			return
		}
		if m.MsgType == "" || len(m.Payload) == 0 || m.Payload[0] != '{' {
			t.Fatalf("accepted an envelope without type or object payload: %+v", m)
		}
		check := func(err error) {
			if err != nil && !errors.Is(err, wire.ErrInvalidMessage) {
				t.Fatalf("payload error of the wrong kind: %v", err)
			}
		}
		reg, err := DecodeRegister(m.Payload)
		check(err)
		if err == nil {
			if reg.APIKey == "" || reg.Name == "" || len(reg.Capabilities) == 0 || reg.ModelInfo[0] != '{' {
				t.Fatalf("accepted an invalid registration: %+v", reg)
			}
			if reg.MaxConcurrency < 0 || reg.MaxConcurrency > MaxNodeConcurrency {
				t.Fatalf("max_concurrency %d out of range", reg.MaxConcurrency)
			}
		}
		_, err = wire.DecodeTaskChunk(m.Payload)
		check(err)
		r, err := wire.DecodeTaskResult(m.Payload)
		check(err)
		if err == nil && (r.TaskID == "" || r.ProcessingTimeMs < -1 || (r.Usage != nil && (r.Usage.PromptTokens < 0 || r.Usage.CompletionTokens < 0))) {
			t.Fatalf("accepted an invalid result: %+v", r)
		}
		hb := wire.DecodeHeartbeat(m.Payload)
		if hb.CPUPercent < 0 || hb.CPUPercent > 100 || hb.ActiveTasks < 0 {
			t.Fatalf("heartbeat out of range: %+v", hb)
		}
	})
}

// FuzzBenchmarkProfile: a node's benchmark_result payload, whatever it
// holds, makes a profile within its bounds that the store and the API can
// write (finite numbers, at most one item per prompt, clipped text).
func FuzzBenchmarkProfile(f *testing.F) {
	for _, s := range []string{
		`{"node_id":"n","results":[{"prompt":"a","response":"b","time_ms":12,"success":true}]}`,
		`{"results":[{"time_ms":"1e308"},{"time_ms":-5},{"time_ms":1e999},{},{},{}]}`,
		`{"results":null}`, `{"results":[1,2]}`, `[]`, `{`, ``,
	} {
		f.Add([]byte(s), int64(1500))
	}
	f.Fuzz(func(t *testing.T, payload []byte, measuredMs int64) {
		p := NewBenchmarkProfile("n", payload, time.Duration(measuredMs)*time.Millisecond, time.Unix(1e9, 0))
		if len(p.Results) > len(BenchmarkPrompts) {
			t.Fatalf("%d results kept", len(p.Results))
		}
		for _, it := range p.Results {
			if utf8.RuneCountInString(it.Prompt) > 200 || utf8.RuneCountInString(it.Response) > 500 || it.TimeMs < 0 || it.TimeMs > 1e9 {
				t.Fatalf("item out of bounds: %d/%d runes, %d ms", utf8.RuneCountInString(it.Prompt), utf8.RuneCountInString(it.Response), it.TimeMs)
			}
		}
		if p.BenchmarkPassed && len(p.Results) == 0 {
			t.Fatal("passed with no results")
		}
		if _, err := json.Marshal(p); err != nil {
			t.Fatalf("the profile cannot be written: %v", err)
		}
	})
}
