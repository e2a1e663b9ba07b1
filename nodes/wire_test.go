package nodes

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestDecodeMessage(t *testing.T) {
	cases := []struct {
		in      string
		wantErr string
		typ     string
		payload string
	}{
		{in: `{"msg_type":"heartbeat","payload":{"active_tasks":1}}`, typ: "heartbeat", payload: `{"active_tasks":1}`},
		{in: `{"msg_type":"heartbeat"}`, typ: "heartbeat", payload: `{}`},
		{in: `{"msg_type":"heartbeat","payload":null,"extra":[1,2]}`, typ: "heartbeat", payload: `{}`},
		{in: `{"msg_id":"x","msg_type":"task_chunk","payload":{"task_id":"t"},"sender_id":"","timestamp":"2026-01-01T00:00:00Z"}`, typ: "task_chunk", payload: `{"task_id":"t"}`},
		{in: `not json`, wantErr: "not a JSON envelope"},
		{in: `[]`, wantErr: "not a JSON envelope"},
		{in: `{"payload":{}}`, wantErr: "msg_type is missing"},
		{in: `{"msg_type":"heartbeat","payload":[1]}`, wantErr: "payload must be an object"},
		{in: `{"msg_type":"heartbeat","payload":"x"}`, wantErr: "payload must be an object"},
		{in: `{"msg_type":7}`, wantErr: "msg_type must be a string"},
	}
	for _, c := range cases {
		m, err := DecodeMessage([]byte(c.in))
		if c.wantErr != "" {
			if err == nil || !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("DecodeMessage(%s) = %v; want an error containing %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("DecodeMessage(%s): %v", c.in, err)
			continue
		}
		if m.MsgType != c.typ || string(m.Payload) != c.payload {
			t.Errorf("DecodeMessage(%s) = %q %s; want %q %s", c.in, m.MsgType, m.Payload, c.typ, c.payload)
		}
	}
}

func TestDecodeResult(t *testing.T) {
	r, err := DecodeResult(json.RawMessage(`{"task_id":"t","node_id":"n","status":"completed","result":"ok","processing_time_ms":12.7,"usage":{"prompt_tokens":3,"completion_tokens":"4"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.TaskID != "t" || r.Status != "completed" || r.Result != "ok" || r.ProcessingMs != 12 || !r.HasUsage || r.PromptTokens != 3 || r.OutputTokens != 4 {
		t.Fatalf("got %+v", r)
	}
	r, err = DecodeResult(json.RawMessage(`{"task_id":"t","status":"failed","result":null,"usage":null}`))
	if err != nil || r.ProcessingMs != -1 || r.HasUsage || r.Result != "" {
		t.Fatalf("missing optional fields: %+v, %v", r, err)
	}
	r, err = DecodeResult(json.RawMessage(`{"task_id":"t","status":"completed","result":{"not":"a string"}}`))
	if err == nil || r.TaskID != "t" {
		t.Fatalf("a non-string result must fail and still name its task: %+v, %v", r, err)
	}
	for _, bad := range []string{`{"status":"completed"}`, `{"task_id":5,"status":"completed"}`, `{"task_id":"t","status":3}`} {
		if _, err := DecodeResult(json.RawMessage(bad)); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("DecodeResult(%s) = %v; want ErrInvalidMessage", bad, err)
		}
	}
}

func TestDecodeHeartbeatClamps(t *testing.T) {
	for in, want := range map[string]Heartbeat{
		`{"active_tasks":2,"cpu_percent":55.5}`:   {ActiveTasks: 2, CPUPercent: 55.5},
		`{"active_tasks":-3,"cpu_percent":250}`:   {ActiveTasks: 0, CPUPercent: 100},
		`{"active_tasks":"x","cpu_percent":"12"}`: {ActiveTasks: 0, CPUPercent: 12},
		`{"cpu_percent":[1]}`:                     {},
		`{"cpu_percent":1e999}`:                   {},
	} {
		if got := DecodeHeartbeat(json.RawMessage(in)); got != want {
			t.Errorf("DecodeHeartbeat(%s) = %+v; want %+v", in, got, want)
		}
	}
}

func TestEncodeIsAnEnvelope(t *testing.T) {
	b := Encode(MsgTaskCancel, CancelPayload{TaskID: "t", Reason: "client gone"})
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["msg_type"] != "task_cancel" || m["sender_id"] != "" || len(m["msg_id"].(string)) != 36 ||
		!strings.HasSuffix(m["timestamp"].(string), "Z") || m["payload"].(map[string]any)["task_id"] != "t" {
		t.Fatalf("envelope %s", b)
	}
}

func TestNodeIDMatchesGemmaNet(t *testing.T) {
	// Computed with Python: uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL,
	// 'https://gemmanet.net/node'), 'acc-1/worker').
	if got := NodeID("acc-1", "worker"); got != "0e307d8f-febf-5fe3-b074-8f27ece3cccf" {
		t.Fatalf("NodeID = %s", got)
	}
	if NodeID("acc-1", "worker") == NodeID("acc-2", "worker") {
		t.Fatal("two accounts share a node id")
	}
}

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
		m, err := DecodeMessage(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("DecodeMessage error of the wrong kind: %v", err)
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
		_, err = DecodeChunk(m.Payload)
		check(err)
		r, err := DecodeResult(m.Payload)
		check(err)
		if err == nil && (r.TaskID == "" || r.ProcessingMs < -1 || r.PromptTokens < 0 || r.OutputTokens < 0) {
			t.Fatalf("accepted an invalid result: %+v", r)
		}
		hb := DecodeHeartbeat(m.Payload)
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
