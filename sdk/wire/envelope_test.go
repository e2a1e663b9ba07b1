package wire

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDecodeEnvelope(t *testing.T) {
	cases := []struct {
		in      string
		wantErr string
		typ     MsgType
		payload string
	}{
		{in: `{"msg_type":"heartbeat","payload":{"active_tasks":1}}`, typ: MsgHeartbeat, payload: `{"active_tasks":1}`},
		{in: `{"msg_type":"heartbeat"}`, typ: MsgHeartbeat, payload: `{}`},
		{in: `{"msg_type":"heartbeat","payload":null,"extra":[1,2]}`, typ: MsgHeartbeat, payload: `{}`},
		{in: `{"msg_type":"heartbeat","payload" :  null  }`, typ: MsgHeartbeat, payload: `{}`},
		{in: `{"msg_id":"x","msg_type":"task_chunk","payload":{"task_id":"t"},"sender_id":"","timestamp":"2026-01-01T00:00:00Z"}`, typ: MsgTaskChunk, payload: `{"task_id":"t"}`},
		{in: `not json`, wantErr: "not a JSON envelope: syntax error at byte 2"},
		{in: `[]`, wantErr: "not a JSON envelope"},
		{in: `{"payload":{}}`, wantErr: "msg_type is missing"},
		{in: `{"msg_type":"heartbeat","payload":[1]}`, wantErr: "payload must be an object"},
		{in: `{"msg_type":"heartbeat","payload":"x"}`, wantErr: "payload must be an object"},
		{in: `{"msg_type":7}`, wantErr: "msg_type must be a string"},
	}
	for _, c := range cases {
		m, err := DecodeEnvelope([]byte(c.in))
		if c.wantErr != "" {
			if err == nil || !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("DecodeEnvelope(%s) = %v; want an error containing %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("DecodeEnvelope(%s): %v", c.in, err)
			continue
		}
		if m.MsgType != c.typ || string(m.Payload) != c.payload {
			t.Errorf("DecodeEnvelope(%s) = %q %s; want %q %s", c.in, m.MsgType, m.Payload, c.typ, c.payload)
		}
	}
}

// ParseEnvelope, the SDK's reading, keeps a payload that is not an object
// for its type's decoder to refuse; DecodeEnvelope, the coordinator's,
// refuses it at once. Both agree on everything else.
func TestParseEnvelope(t *testing.T) {
	for _, tc := range []struct {
		in      string
		typ     MsgType
		payload string
		bad     bool
	}{
		{`{"msg_type":"task_cancel","payload":{"task_id":"x"}}`, MsgTaskCancel, `{"task_id":"x"}`, false},
		{`{"msg_type":"node_registered"}`, MsgNodeRegistered, `{}`, false},
		{`{"msg_type":"benchmark","payload":null,"extra":1}`, MsgBenchmark, `{}`, false},
		{`{"msg_type":"x","payload":"str"}`, "x", `"str"`, false},
		{`{"msg_type":"x","payload":[1]}`, "x", `[1]`, false},
		{`{"payload":{}}`, "", "", true},
		{`[1]`, "", "", true},
		{`nope`, "", "", true},
	} {
		env, err := ParseEnvelope([]byte(tc.in))
		if (err != nil) != tc.bad || env.MsgType != tc.typ || string(env.Payload) != tc.payload {
			t.Errorf("ParseEnvelope(%s) = %s %s, %v", tc.in, env.MsgType, env.Payload, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("ParseEnvelope(%s): error of the wrong kind: %v", tc.in, err)
		}
		_, derr := DecodeEnvelope([]byte(tc.in))
		if object := !tc.bad && tc.payload[0] == '{'; (derr == nil) != object {
			t.Errorf("DecodeEnvelope(%s) = %v", tc.in, derr)
		}
	}
	env, _ := ParseEnvelope([]byte(`{"msg_type":"task_cancel","payload":"str"}`))
	var p TaskCancelPayload
	if err := env.DecodePayload(&p); !errors.Is(err, ErrInvalidMessage) || !strings.Contains(err.Error(), "task_cancel payload") {
		t.Errorf("DecodePayload of a string into an object = %v", err)
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestEncodeIsAnEnvelope(t *testing.T) {
	b, err := Encode(MsgTaskCancel, TaskCancelPayload{TaskID: "t", Reason: "client gone"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	id, _ := m["msg_id"].(string)
	ts, _ := m["timestamp"].(string)
	if m["msg_type"] != "task_cancel" || m["sender_id"] != "" || !uuidV4.MatchString(id) ||
		m["payload"].(map[string]any)["task_id"] != "t" {
		t.Fatalf("envelope %s", b)
	}
	if _, err := time.Parse(time.RFC3339, ts); err != nil || !strings.HasSuffix(ts, "Z") || len(ts) != len("2006-01-02T15:04:05.000000Z") {
		t.Errorf("timestamp %q", ts)
	}
	b2, _ := Encode(MsgTaskCancel, TaskCancelPayload{})
	var m2 map[string]any
	_ = json.Unmarshal(b2, &m2)
	if m2["msg_id"] == id {
		t.Errorf("two messages share msg_id %s", id)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	data, err := Encode(MsgTaskChunk, TaskChunkPayload{TaskID: "t", Delta: "d"})
	if err != nil {
		t.Fatal(err)
	}
	for _, decode := range []func([]byte) (Envelope, error){ParseEnvelope, DecodeEnvelope} {
		env, err := decode(data)
		if err != nil {
			t.Fatal(err)
		}
		var p TaskChunkPayload
		if err := env.DecodePayload(&p); err != nil || p != (TaskChunkPayload{TaskID: "t", Delta: "d"}) {
			t.Errorf("payload %+v, %v", p, err)
		}
	}
}

func TestEncodeRefusesWhatCannotMarshal(t *testing.T) {
	if _, err := Encode(MsgNodeRegister, RegisterPayload{ModelInfo: map[string]any{"c": make(chan int)}}); err == nil {
		t.Fatal("a channel in model_info encoded")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustEncode of invalid params did not panic")
		}
	}()
	MustEncode(MsgTaskAssign, TaskAssignPayload{Params: json.RawMessage(`{`)})
}

// The largest task_assign the coordinator may send fits MaxAssignBytes:
// content of 200,000 characters, params of 32 KiB and a resume_text of the
// default result cap, every character one that JSON writes in 6 bytes.
func TestWorstTaskAssignFitsMaxAssignBytes(t *testing.T) {
	params := `{"p":"` + strings.Repeat("<", 32<<10-8) + `"}`
	p := TaskAssignPayload{
		TaskID:     "0b8f3a52-3d4e-4bb1-8f2a-0c6f1f1d9e77",
		TaskType:   strings.Repeat("t", 64),
		Content:    strings.Repeat("\x01", 200_000),
		Params:     json.RawMessage(params),
		Stream:     true,
		ResumeText: strings.Repeat("&", 1<<20),
	}
	b := MustEncode(MsgTaskAssign, p)
	if least := 6*(200_000+1<<20) + 6*(32<<10-8); len(b) < least {
		t.Fatalf("the worst task_assign encoded in %d bytes, want at least %d: not the worst case", len(b), least)
	}
	if len(b) > MaxAssignBytes {
		t.Errorf("the worst task_assign is %d bytes, over MaxAssignBytes (%d)", len(b), MaxAssignBytes)
	}
	env, err := ParseEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	var back TaskAssignPayload
	if err := env.DecodePayload(&back); err != nil || back.ResumeText != p.ResumeText || back.Content != p.Content {
		t.Errorf("read back: %v", err)
	}
}
