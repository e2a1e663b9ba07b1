package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	segjson "github.com/segmentio/encoding/json"
)

func TestParseTaskBody(t *testing.T) {
	b, err := parseTaskBody([]byte(`{"task_type":"echo","content":"hi","params":{ "a" : [1, {"b": "c"}] },"stream":true,"trust":"official","api_key":"k","extra":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if b.TaskType != "echo" || b.Content != "hi" || string(b.Params) != `{"a":[1,{"b":"c"}]}` || !b.Stream || b.Trust != "official" {
		t.Fatalf("%+v", b)
	}
	b, err = parseTaskBody([]byte(`{"task_type":"echo","content":"","params":null}`))
	if err != nil || string(b.Params) != "{}" || b.Trust != "any" || b.Stream {
		t.Fatalf("defaults: %+v, %v", b, err)
	}
	for _, key := range []string{"_x", "héllo", "x1", "a_b_c"} {
		if _, err := checkParams(json.RawMessage(`{"` + key + `":1}`)); err != nil {
			t.Errorf("identifier %q refused: %v", key, err)
		}
	}
	for _, key := range []string{"", "1x", "a-b", "a b", "content"} {
		if _, err := checkParams(json.RawMessage(`{"` + key + `":1}`)); err == nil {
			t.Errorf("key %q accepted", key)
		}
	}
	deep := `{"a":{"b":{"c":{"d":1}}}}`
	if _, err := checkParams(json.RawMessage(deep)); err != nil {
		t.Errorf("4 levels refused: %v", err)
	}
	if _, err := checkParams(json.RawMessage(`{"a":[[[[1]]]]}`)); err == nil {
		t.Error("5 levels of arrays accepted")
	}
	big := `{"s":"` + strings.Repeat("x", 8000) + `","t":"` + strings.Repeat("y", 8000) + `","u":"` + strings.Repeat("z", 8000) + `","v":"` + strings.Repeat("w", 8000) + `","w":"` + strings.Repeat("v", 8000) + `"}`
	if _, err := checkParams(json.RawMessage(big)); err == nil || !strings.Contains(err.Error(), "32768 bytes") {
		t.Errorf("params over 32 KiB: %v", err)
	}
}

// Params are checked as a node will decode them: a
// number a node cannot hold is refused at the door.
func TestParamsANodeCanDecode(t *testing.T) {
	for _, c := range []struct {
		params string
		ok     bool
		want   string
	}{
		{`{"n":1e999999}`, false, "fit a 64-bit float"},
		{`{"n":-1e400}`, false, "fit a 64-bit float"},
		{`{"n":1.8e308}`, false, "fit a 64-bit float"},
		{`{"n":[1,{"m":2e308}]}`, false, "fit a 64-bit float"},
		{`{"n":1.7e308}`, true, ""},
		{`{"n":1e-999999}`, true, ""}, // reads as 0 everywhere
		{`{"n":9007199254740992}`, true, ""},
		{`{"n":-9007199254740992}`, true, ""},
		{`{"n":9007199254740993}`, false, "between -2^53 and 2^53"},
		{`{"n":-9007199254740993}`, false, "between -2^53 and 2^53"},
		{`{"n":123456789012345678901234567890}`, false, "between -2^53 and 2^53"},
		{`{"n":9007199254740993.0}`, true, ""}, // a float, read as one
		{`{"n":0.5,"m":-0,"k":1E3}`, true, ""},
		{"{\"s\":\"\xff\"}", false, "valid UTF-8"},
		{`{"s":"\ud800"}`, true, ""}, // an escape, valid JSON text
	} {
		_, err := checkParams(json.RawMessage(c.params))
		switch {
		case c.ok && err != nil:
			t.Errorf("%s refused: %v", c.params, err)
		case !c.ok && (err == nil || !errors.Is(err, errInvalidBody) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error containing %q", c.params, err, c.want)
		}
	}
}

// The attack: a request whose params another
// account's node cannot decode is refused with 422 before any node sees it.
func TestUndecodableParamsAre422(t *testing.T) {
	ta := startApp(t, nil)
	victim := ta.account(t, "bob", "")
	n := connectNode(t, ta.wsURL, reg(victim, "w", "echo"))
	attacker := ta.account(t, "mallory", "")
	var e apiErr
	code, _ := ta.call(t, http.MethodPost, "/api/v1/request", attacker,
		`{"task_type":"echo","content":"x","params":{"n":1e999999}}`, &e)
	if code != http.StatusUnprocessableEntity || e.Error.Code != "invalid_request" || !strings.Contains(e.Error.Message, "64-bit float") {
		t.Fatalf("HTTP %d %+v", code, e)
	}
	// The node was never handed it: the next thing it gets is a sound task.
	ch := ta.requestAsync(attacker, map[string]any{"task_type": "echo", "content": "fine", "params": map[string]any{"n": 1}})
	m := n.Expect("task_assign")
	if m.Payload["content"] != "fine" {
		t.Fatalf("the node got %v", m.Payload)
	}
	n.Result(m.TaskID(), "completed", "ok")
	if r := waitFor(t, ch, 5*time.Second); r.code != http.StatusOK {
		t.Fatalf("HTTP %d %s", r.code, r.body)
	}
}

// FuzzParseTaskBody: any bytes give a valid body or an errInvalidBody,
// never a panic, and whatever is accepted keeps every documented limit.
func FuzzParseTaskBody(f *testing.F) {
	for _, s := range []string{
		`{"task_type":"echo","content":"hello"}`,
		`{"task_type":"echo","content":"x","params":{"temperature":0.5,"style":{"loud":true}},"stream":true}`,
		`{"task_type":"t","content":"","params":{"a":[1,[2,[3]]]},"trust":"official","api_key":"gn_x"}`,
		`{"task_type":"","content":"x"}`, `{"content":1}`, `[]`, `{`, `null`, `{"params":{"content":1}}`,
		`{"task_type":"t","content":"","params":{"n":1e999999}}`,
		`{"task_type":"t","content":"","params":{"n":[1e-999999,9007199254740993]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := parseTaskBody(data)
		if err != nil {
			if !errors.Is(err, errInvalidBody) {
				t.Fatalf("error of the wrong kind: %v", err)
			}
			return
		}
		if n := utf8.RuneCountInString(b.TaskType); n < 1 || n > maxTaskTypeChars {
			t.Fatalf("task_type of %d characters accepted", n)
		}
		if utf8.RuneCountInString(b.Content) > maxContentChars {
			t.Fatal("oversized content accepted")
		}
		if len(b.Params) > maxParamBytes || !json.Valid(b.Params) || b.Params[0] != '{' {
			t.Fatalf("params %q accepted", b.Params)
		}
		if b.Trust != "any" && b.Trust != "official" {
			t.Fatalf("trust %q accepted", b.Trust)
		}
		// A node decodes what was accepted: the Go SDK's way (into
		// map[string]any, numbers as float64) must not fail.
		var m map[string]any
		if err := json.Unmarshal(b.Params, &m); err != nil {
			t.Fatalf("params %s accepted but a Go node cannot decode it: %v", b.Params, err)
		}
		if !utf8.Valid(b.Params) {
			t.Fatalf("params %q accepted with invalid UTF-8", b.Params)
		}
		// What was accepted is accepted again, unchanged.
		again, err := checkParams(b.Params)
		if err != nil || string(again) != string(b.Params) {
			t.Fatalf("params %s not stable: %s, %v", b.Params, again, err)
		}
	})
}

// FuzzDecodeObjectAgrees holds decodeObject to its reading through a
// json.Decoder alone (decodeObjectByDecoder, as it was first written): on
// every body both accept with the same value or refuse with the same error.
func FuzzDecodeObjectAgrees(f *testing.F) {
	for _, s := range []string{
		`{"task_type":"echo","content":"hello","params":{"a":1},"stream":true,"priority":3,"node_labels":{"r":"eu"}}`,
		`{"task_type":"echo"} {"task_type":"again"}`, `{"task_type":"echo"} x`, `{"stream":"yes"}`, `{"priority":1.5}`,
		`{"node_labels":{"r":1}}`, ` {"a":1} `, `{`, `{"task_type":"\ud800"}`, `{"params":{"n":1e999}}`,
	} {
		f.Add([]byte(s))
	}
	type target struct {
		TaskType *string           `json:"task_type"`
		Params   json.RawMessage   `json:"params"`
		Stream   *bool             `json:"stream"`
		Priority *int              `json:"priority"`
		Labels   map[string]string `json:"node_labels"`
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want target
		gerr := decodeObject(data, &got)
		werr := decodeObjectByDecoder(data, &want)
		if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) || (gerr == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("decodeObject(%q) = %+v, %v; through a Decoder: %+v, %v", data, got, gerr, want, werr)
		}
	})
}

// decodeObjectByDecoder is decodeObject as first written, every body read
// through a json.Decoder (decodeOne): FuzzDecodeObjectAgrees's reference.
func decodeObjectByDecoder(b []byte, v any) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return invalid("the body must be a JSON object")
	}
	return decodeOne(b, v)
}

// BenchmarkDecodeTaskBody decodes a task body as decodeObject's one pass
// does, with segmentio/encoding/json and with encoding/json.
func BenchmarkDecodeTaskBody(b *testing.B) {
	body := []byte(`{"task_type":"echo","content":"hello world, a prompt of some length","params":{"max_tokens":16}}`)
	for _, c := range []struct {
		name      string
		unmarshal func([]byte, any) error
	}{{"segmentio", segjson.Unmarshal}, {"encoding_json", json.Unmarshal}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var t taskBody
				if err := c.unmarshal(body, &t); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
