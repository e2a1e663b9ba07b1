package server

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseTaskBody(t *testing.T) {
	b, err := parseTaskBody([]byte(`{"task_type":"echo","content":"hi","params":{ "a" : [1, {"b": "c"}] },"stream":true,"trust":"official","api_key":"k","extra":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if b.TaskType != "echo" || b.Content != "hi" || string(b.Params) != `{"a":[1,{"b":"c"}]}` || !b.Stream || b.Trust != "official" || b.APIKey != "k" {
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

// FuzzParseTaskBody: any bytes give a valid body or an errInvalidBody,
// never a panic, and whatever is accepted keeps every documented limit.
func FuzzParseTaskBody(f *testing.F) {
	for _, s := range []string{
		`{"task_type":"echo","content":"hello"}`,
		`{"task_type":"echo","content":"x","params":{"temperature":0.5,"style":{"loud":true}},"stream":true}`,
		`{"task_type":"t","content":"","params":{"a":[1,[2,[3]]]},"trust":"official","api_key":"gn_x"}`,
		`{"task_type":"","content":"x"}`, `{"content":1}`, `[]`, `{`, `null`, `{"params":{"content":1}}`,
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
		// What was accepted is accepted again, unchanged.
		again, err := checkParams(b.Params)
		if err != nil || string(again) != string(b.Params) {
			t.Fatalf("params %s not stable: %s, %v", b.Params, again, err)
		}
	})
}
