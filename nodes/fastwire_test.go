package nodes

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// FuzzFastWireAgrees: whatever a node sends, the coordinator's reading of
// it (readFast: Wire, then wire.Standard for what Wire refuses) is
// encoding/json's: the same message, or the same error in the same words.
// Each input is read as a whole frame and as a payload of each kind.
func FuzzFastWireAgrees(f *testing.F) {
	for _, s := range []string{
		`{"msg_id":"m","msg_type":"task_result","payload":{"task_id":"t","status":"completed","result":"r","processing_time_ms":5,"usage":{"prompt_tokens":1,"completion_tokens":2}},"sender_id":"n","timestamp":"2026-12-06T03:00:00.000000Z"}`,
		`{"msg_type":"task_chunk","payload":{"task_id":"t","delta":"abc"}}`,
		`{"MSG_TYPE":"task_chunk","Payload":{"Task_ID":"t","DELTA":"a\u00e9\ud83d\ude00"}}`,
		`{"msg_type":"x","msg_type":"y","payload":null,"payload":{"a":1}}`,
		"{\"msg_type\":\"task_chunk\",\"payload\":{\"task_id\":\"t\xff\",\"delta\":\"\xed\xa0\x80\"}}",
		`{"msg_type":"task_result","payload":{"task_id":"t","status":1}}`,
		`{"task_id":"t","status":"failed","result":null,"processing_time_ms":"12.5","usage":[]}`,
		`{"task_id":"t","status":"completed","result":"r","processing_time_ms":1e400}`,
		`{"msg_type":"heartbeat","payload":  {"cpu_percent":3}  ,"timestamp":7}`,
		`{"msg_type":"x","payload":"str"}`, `{"msg_type":"x","payload":[1,2]}`,
		`{}`, `[]`, `null`, ` {"msg_type":"x"} `, `{"msg_type":"x"}x`, `{"msg_type":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		agree(t, "envelope", b, wire.Codec.DecodeEnvelope)
		agree(t, "task_result", json.RawMessage(b), wire.Codec.DecodeTaskResult)
		agree(t, "task_chunk", json.RawMessage(b), wire.Codec.DecodeTaskChunk)
	})
}

// agree fails t unless readFast's reading of b is wire.Standard's.
func agree[T any, B ~[]byte](t *testing.T, what string, b B, read func(wire.Codec, B) (T, error)) {
	t.Helper()
	// Each reading gets its own copy: neither may keep or change b.
	got, gotErr := readFast(append(B(nil), b...), read)
	want, wantErr := read(wire.Standard, append(B(nil), b...))
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("%s %q: error %v, encoding/json's %v", what, b, gotErr, wantErr)
	}
	if gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%s %q: read as %#v, encoding/json's %#v", what, b, got, want)
	}
}

// TestFastWireReadsEveryResult: the fast reading is the one taken for a
// well-formed result (a fallback that hid a refusal would pass the fuzz
// test while costing both readings).
func TestFastWireReadsEveryResult(t *testing.T) {
	e, err := Wire.DecodeEnvelope(resultFrame)
	if err != nil {
		t.Fatalf("Wire refused a well-formed frame: %v", err)
	}
	if _, err := Wire.DecodeTaskResult(e.Payload); err != nil {
		t.Fatalf("Wire refused a well-formed task_result: %v", err)
	}
}

var resultFrame = []byte(`{"msg_id":"6f1c2a34-6f0e-4c4e-9a55-1c0d2d3c4b5a","msg_type":"task_result","payload":{"task_id":"0b7d8f7e-2c57-4d4b-8f3c-0e6a2b8e9d11","status":"completed","result":"hello from the echo node","processing_time_ms":0,"usage":{"prompt_tokens":12,"completion_tokens":5}},"sender_id":"node-12","timestamp":"2026-12-06T03:00:00.000000Z"}`)

// BenchmarkReadNodeResult reads a task_result frame as the session does, with
// the fast reader and with encoding/json's.
func BenchmarkReadNodeResult(b *testing.B) {
	for _, c := range []struct {
		name string
		r    wire.Codec
	}{{"segmentio", Wire}, {"encoding_json", wire.Standard}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e, err := c.r.DecodeEnvelope(resultFrame)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.r.DecodeTaskResult(json.RawMessage(e.Payload)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzWireEncodesAssignAsStandard: the task_assign the coordinator sends
// through Wire is encoding/json's, byte for byte (but for its fresh msg_id
// and time). Its params are JSON, checked by the requesting instance
// (server's checkParams): Wire, unlike encoding/json, does not check a
// RawMessage again (it writes "000" as it is), so other params are not
// asked of it.
func FuzzWireEncodesAssignAsStandard(f *testing.F) {
	f.Add("t-1", "echo", "hello <b>&</b> \u2028 \xff", []byte(`{"max_tokens": 16, "s":"<\u00e9>"}`), true, "")
	f.Add("t", "x", "\x00\x1f\"\\", []byte(` [1, {"a" : null}] `), false, "so far <\u2029> \xfe")
	f.Fuzz(func(t *testing.T, id, typ, content string, params []byte, stream bool, resume string) {
		if !json.Valid(params) {
			return
		}
		p := wire.TaskAssignPayload{TaskID: id, TaskType: typ, Content: content, Params: params, Stream: stream, ResumeText: resume}
		got, gotErr := Wire.Encode(wire.MsgTaskAssign, p)
		want, wantErr := wire.Standard.Encode(wire.MsgTaskAssign, p)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%+v: error %v, encoding/json's %v", p, gotErr, wantErr)
		}
		if gotErr != nil {
			return
		}
		var g, w map[string]json.RawMessage
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("Wire wrote %q, not JSON: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(g) != len(w) {
			t.Fatalf("Wire wrote %q, encoding/json %q", got, want)
		}
		for _, k := range []string{"msg_type", "payload", "sender_id"} {
			if string(g[k]) != string(w[k]) {
				t.Fatalf("%s: Wire wrote %s, encoding/json %s", k, g[k], w[k])
			}
		}
	})
}

// BenchmarkEncodeAssign encodes a task_assign as the owner does, with Wire
// and with encoding/json.
func BenchmarkEncodeAssign(b *testing.B) {
	p := wire.TaskAssignPayload{TaskID: "0b7d8f7e-2c57-4d4b-8f3c-0e6a2b8e9d11", TaskType: "echo",
		Content: "hello world, a prompt of some length", Params: json.RawMessage(`{"max_tokens":16}`)}
	for _, c := range []struct {
		name string
		c    wire.Codec
	}{{"segmentio", Wire}, {"encoding_json", wire.Standard}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.c.MustEncode(wire.MsgTaskAssign, p)
			}
		})
	}
}
