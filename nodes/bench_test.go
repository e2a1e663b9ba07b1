package nodes

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzBenchmarkProfile: a node's benchmark_result payload, whatever it
// holds, makes a profile within its bounds that the store and the API can
// write (finite numbers, at most one item per prompt, clipped text).
func FuzzBenchmarkProfile(f *testing.F) {
	for _, s := range []string{
		`{"node_id":"n","results":[{"prompt":"a","response":"b","time_ms":12,"success":true}]}`,
		`{"results":[{"time_ms":"1e308"},{"time_ms":-5},{"time_ms":1e999},{},{},{}]}`,
		`{"results":null}`, `{"results":[1,2]}`, `{"results":[{"prompt":"a\u0000","response":"\u0000b"}]}`, `[]`, `{`, ``,
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
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("the profile cannot be written: %v", err)
		}
		if bytes.Contains(b, []byte(`\u0000`)) {
			t.Fatalf("the profile holds a NUL, which PostgreSQL's jsonb refuses: %s", b)
		}
	})
}
