package tasks

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
)

// A node's usage report, as task_result carries it and the coordinator
// reads it, is held to what the node handled (invariant 18): prompt tokens
// to the bytes sent, completion tokens to the bytes returned or the
// request's max_tokens, whichever is smaller. Only a report past the bytes
// by more than usageSlack is implausible; max_tokens never makes one so.
func TestClampUsage(t *testing.T) {
	tiny := handled{sent: 3, returned: 1, maxTokens: noMaxTokens} // content "x", params {}, result "x"
	cases := []struct {
		name  string
		usage string // task_result's usage, as the node sent it
		h     handled
		want  store.Usage
		cut   [2]int64 // prompt, completion
		byMax bool
		bad   bool // implausible
	}{
		{"honest", `{"prompt_tokens":2,"completion_tokens":1}`, tiny, store.Usage{PromptTokens: 2, CompletionTokens: 1}, [2]int64{}, false, false},
		{"exactly the bytes", `{"prompt_tokens":3,"completion_tokens":1}`, tiny, store.Usage{PromptTokens: 3, CompletionTokens: 1}, [2]int64{}, false, false},
		{"1e308 and 1e17 for a one-byte request", `{"prompt_tokens":1e308,"completion_tokens":99999999999999999}`, tiny,
			store.Usage{PromptTokens: 3, CompletionTokens: 1}, [2]int64{1<<31 - 1 - 3, 1<<31 - 1 - 1}, false, true},
		{"as numeric strings", `{"prompt_tokens":"1e308","completion_tokens":"12"}`, tiny,
			store.Usage{PromptTokens: 3, CompletionTokens: 1}, [2]int64{1<<31 - 1 - 3, 11}, false, true},
		{"negative", `{"prompt_tokens":-5,"completion_tokens":-1e308}`, tiny, store.Usage{}, [2]int64{}, false, false},
		{"not numbers", `{"prompt_tokens":"NaN","completion_tokens":[1]}`, tiny, store.Usage{}, [2]int64{}, false, false},
		{"infinite as a string", `{"prompt_tokens":"Infinity","completion_tokens":"-Inf"}`, tiny, store.Usage{}, [2]int64{}, false, false},
		{"fractions round down", `{"prompt_tokens":2.9,"completion_tokens":0.5}`, tiny, store.Usage{PromptTokens: 2}, [2]int64{}, false, false},
		{"template overhead within the slack", `{"prompt_tokens":40,"completion_tokens":1}`, tiny,
			store.Usage{PromptTokens: 3, CompletionTokens: 1}, [2]int64{37, 0}, false, false},
		{"prompt past the slack", `{"prompt_tokens":4100}`, tiny, store.Usage{PromptTokens: 3}, [2]int64{4097, 0}, false, true},
		{"completion at the slack", `{"completion_tokens":4097}`, tiny, store.Usage{CompletionTokens: 1}, [2]int64{0, 4096}, false, false},
		{"completion past the slack", `{"completion_tokens":4098}`, tiny, store.Usage{CompletionTokens: 1}, [2]int64{0, 4097}, false, true},
		{"max_tokens bounds the completion", `{"prompt_tokens":10,"completion_tokens":50}`,
			handled{sent: 100, returned: 200, maxTokens: 16}, store.Usage{PromptTokens: 10, CompletionTokens: 16}, [2]int64{0, 34}, true, false},
		{"a node that ignores max_tokens is not implausible", `{"completion_tokens":200}`,
			handled{sent: 100, returned: 200, maxTokens: 0}, store.Usage{}, [2]int64{0, 200}, true, false},
		{"max_tokens above the bytes", `{"completion_tokens":300}`,
			handled{sent: 100, returned: 200, maxTokens: 1000}, store.Usage{CompletionTokens: 200}, [2]int64{0, 100}, false, false},
		{"max_tokens not reached", `{"completion_tokens":5}`,
			handled{sent: 100, returned: 200, maxTokens: 16}, store.Usage{CompletionTokens: 5}, [2]int64{}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := wire.DecodeTaskResult([]byte(`{"task_id":"t","status":"completed","usage":` + c.usage + `}`))
			if err != nil || r.Usage == nil {
				t.Fatalf("decode: %v %+v", err, r)
			}
			got := clampUsage(*r.Usage, c.h)
			if got.usage != c.want || [2]int64{got.promptCut, got.completionCut} != c.cut || got.byMax != c.byMax || (got.implausible != "") != c.bad {
				t.Fatalf("clampUsage(%s, %+v) = %+v\nwant %+v, cut %v, byMax %v, implausible %v", c.usage, c.h, got, c.want, c.cut, c.byMax, c.bad)
			}
		})
	}
	// A Usage made by other means than the decoder: negatives are 0.
	if got := clampUsage(wire.Usage{PromptTokens: -7, CompletionTokens: -1}, tiny); got.usage != (store.Usage{}) || got.promptCut != 0 || got.implausible != "" {
		t.Fatalf("negative counts: %+v", got)
	}
}

// max_tokens is read from the params the node was sent: the top-level key
// spelled so, a whole number of at least 0, the last of repeated keys.
func TestMaxTokensOf(t *testing.T) {
	cases := []struct {
		params string
		want   int64
	}{
		{`{}`, noMaxTokens},
		{`{"max_tokens":16}`, 16},
		{" { \"max_tokens\" :\t16 } \n", 16},
		{`{"messages":[{"role":"user","content":"x"}],"max_tokens":50,"temperature":0.5}`, 50},
		{`{"max_tokens":0}`, 0},
		{`{"max_tokens":100.0}`, 100},
		{`{"max_tokens":1e3}`, 1000},
		{`{"max_tokens":1e400}`, noMaxTokens},
		{`{"max_tokens":1.5}`, noMaxTokens},
		{`{"max_tokens":-1}`, noMaxTokens},
		{`{"max_tokens":"16"}`, noMaxTokens},
		{`{"max_tokens":null}`, noMaxTokens},
		{`{"max_tokens":16,"max_tokens":8}`, 8},
		{`{"MAX_TOKENS":16}`, noMaxTokens},
		{`{"options":{"max_tokens":16}}`, noMaxTokens},
		{`{"prompt":"\"max_tokens\": 16"}`, noMaxTokens},
		{`{"max_tokens":16`, noMaxTokens},
		{`[{"max_tokens":16}]`, noMaxTokens},
		{`{"max_tokens":9007199254740993}`, 1 << 53},
	}
	for _, c := range cases {
		if got := maxTokensOf([]byte(c.params)); got != c.want {
			t.Errorf("maxTokensOf(%s) = %d, want %d", c.params, got, c.want)
		}
	}
}

// FuzzMaxTokensOf: whatever params a client sends, maxTokensOf reads them
// as encoding/json reads the object a node is sent: a bound it finds is
// the object's top-level max_tokens, a whole number from 0 to 2^53; and
// in params without escapes, it finds the bound whenever the object has
// one.
func FuzzMaxTokensOf(f *testing.F) {
	for _, s := range []string{`{}`, `{"max_tokens":16}`, `{"max_tokens":16,"max_tokens":8}`, `{"max_tokens":1.5}`,
		`{"messages":[{"role":"user","content":"max_tokens"}],"max_tokens":50}`, `{"max_tokens":1e3}`, `{"max_tokens":-0}`,
		`{"max\u005ftokens":3,"max_tokens":4}`, `{"max_tokens":16`, `[]`, `{"a":{"max_tokens":1}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		got := maxTokensOf(params)
		if got != noMaxTokens && (got < 0 || got > 1<<53) {
			t.Fatalf("maxTokensOf(%q) = %d", params, got)
		}
		var m map[string]json.RawMessage
		valid := json.Unmarshal(params, &m) == nil && m != nil
		want := int64(noMaxTokens)
		if v, ok := m["max_tokens"]; valid && ok {
			want = wholeNumber(v)
		}
		if got != noMaxTokens && got != want {
			t.Fatalf("maxTokensOf(%q) = %d, but the object's max_tokens reads %d", params, got, want)
		}
		if !bytes.Contains(params, []byte(`\`)) && got != want {
			t.Fatalf("maxTokensOf(%q) = %d, want %d", params, got, want)
		}
	})
}

// BenchmarkMaxTokensOf reads the params of an OpenAI chat request (a
// conversation of 2 KiB) with max_tokens, and without: every assign of
// such a request pays it once, on the owner.
func BenchmarkMaxTokensOf(b *testing.B) {
	msgs := `{"messages":[{"role":"system","content":"` + strings.Repeat("be brief. ", 100) + `"},{"role":"user","content":"` +
		strings.Repeat("what is this? ", 73) + `"}]`
	for _, c := range []struct{ name, params string }{{"with", msgs + `,"max_tokens":256,"temperature":0.7}`}, {"without", msgs + `}`}} {
		b.Run(c.name, func(b *testing.B) {
			p := []byte(c.params)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				maxTokensOf(p)
			}
		})
	}
}
