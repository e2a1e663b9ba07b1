package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	segjson "github.com/segmentio/encoding/json"

	"github.com/switchyard-dev/switchyard/internal/boundtest"
)

// shape is b's deepest nesting and its widest container (items of an
// array, members of an object) as encoding/json reads them (b must be
// valid JSON).
func shape(t testing.TB, b []byte) (deepest, widest int) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type open struct {
		object bool
		tokens int // an object's keys and values, an array's items
	}
	var stack []open
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return deepest, widest
		}
		if err != nil {
			t.Fatalf("shape(%q): %v", b, err)
		}
		if tok == json.Delim(']') || tok == json.Delim('}') {
			top := stack[len(stack)-1]
			if top.object {
				top.tokens /= 2
			}
			widest = max(widest, top.tokens)
			stack = stack[:len(stack)-1]
			continue
		}
		if n := len(stack); n > 0 {
			stack[n-1].tokens++
		}
		if tok == json.Delim('[') || tok == json.Delim('{') {
			stack = append(stack, open{object: tok == json.Delim('{')})
			deepest = max(deepest, len(stack))
		}
	}
}

func TestCheckBounds(t *testing.T) {
	for _, tc := range []struct {
		in          string
		depth, wide int
		refused     bool
	}{
		{`{}`, 1, 1, false},
		{`{}`, 0, 1, true},
		{`"[[[[["`, 0, 1, false},
		{`{"a":"\"[[[["}`, 1, 2, false},
		{`{"a":"\\"}`, 1, 2, false},
		{`{"a":"\\","b":[[1]]}`, 2, 2, true},
		{`{"a":"x\\\"[[","b":[1]}`, 2, 2, false},
		{`[[[]]]`, 3, 1, false},
		{`[[[]]]`, 2, 1, true},
		{`[{"k":[{"k":[]}]}]`, 5, 1, false},
		{`[{"k":[{"k":[]}]}]`, 4, 1, true},
		{`["unterminated [[[[`, 1, 1, false},
		{`[1,2,3]`, 1, 3, false},
		{`[1,2,3]`, 1, 2, true},
		{`[[1,2],[3,4],[5,6]]`, 2, 3, false},
		{`[[1,2],[3,4],[5,6]]`, 2, 2, true},
		{`{"a":1,"b":2}`, 1, 2, false},
		{`{"a":1,"b":2}`, 1, 1, true},
		{`["a,b,c,d"]`, 1, 1, false},
		{`],],],[1,2]`, 1, 2, false},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), MaxDepth, MaxElements, true},
		{strings.Repeat("[", 64) + strings.Repeat("]", 64), MaxDepth, MaxElements, false},
	} {
		err := checkBounds([]byte(tc.in), tc.depth, tc.wide)
		if (err != nil) != tc.refused {
			t.Errorf("checkBounds(%.40q, %d, %d) = %v, want refused %v", tc.in, tc.depth, tc.wide, err, tc.refused)
		}
		if err != nil && !errors.Is(err, ErrOutOfBounds) {
			t.Errorf("checkBounds(%.40q) error of the wrong kind: %v", tc.in, err)
		}
	}
}

// A node frame of a million '[' is refused before a decoder recurses into
// it: before CheckBounds, segmentio's decoder (the coordinator's codec,
// nodes.Wire) grew the reading goroutine's stack to 512 MiB for a 2 MB
// frame, and accepted it.
func TestDeepFrameRefusedWithoutStack(t *testing.T) {
	n := 1_000_000
	frame := []byte(`{"msg_type":"task_result","payload":{"task_id":"t","x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}}`)
	codec := NewCodec(segjson.Marshal, segjson.Unmarshal)
	var err error
	c := boundtest.Measure(func() { _, err = codec.DecodeEnvelope(frame) })
	if !errors.Is(err, ErrInvalidMessage) || !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("DecodeEnvelope of a deep frame: %v, want ErrInvalidMessage and ErrOutOfBounds", err)
	}
	if c.Stack > boundtest.MaxStackGrowth || c.Alloc > boundtest.Slack {
		t.Errorf("refusing a %d-byte frame grew the stack by %d bytes and allocated %d", len(frame), c.Stack, c.Alloc)
	}
}

// FuzzCheckBounds holds checkBounds to encoding/json's reading of valid
// JSON: refused exactly when it nests deeper, or holds a wider container,
// than the bounds. On any other input it must only return.
func FuzzCheckBounds(f *testing.F) {
	for _, s := range []string{`{}`, `[[1,[2]],{"a":"[\"]"}]`, `"\\\\"`, `{"a":"\\\"{{"}`, `[[[[[[]]]]]]`, `[`, `"`, `[1,2,[3,4,5],{"a":1,"b":[]}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := json.Valid(b)
		var deepest, widest int
		if valid {
			deepest, widest = shape(t, b)
		}
		for _, depth := range []int{0, 1, 2, 3, 5} {
			for _, wide := range []int{1, 2, 3, 4} {
				err := checkBounds(b, depth, wide)
				if err != nil && !errors.Is(err, ErrOutOfBounds) {
					t.Fatalf("error of the wrong kind: %v", err)
				}
				if valid && (err != nil) != (deepest > depth || widest > wide) {
					t.Fatalf("checkBounds(%q, %d, %d) = %v; encoding/json reads %d levels, %d items at most", b, depth, wide, err, deepest, widest)
				}
			}
		}
	})
}

// Every reading of a node's frame, fed the worst JSON in each field of its
// payload and in a field it does not know: refused, or read within
// boundtest's bounds (invariant 16). A node of any account sends these,
// up to --max-message-bytes (4 MiB) each.
func TestNodeFrameReadingsAreBounded(t *testing.T) {
	fast := NewCodec(segjson.Marshal, segjson.Unmarshal) // the coordinator's (nodes.Wire)
	readers := []struct {
		name   string
		fields []string
		read   func(Envelope)
	}{
		{"task_chunk", []string{`{"task_id":"t","delta":%s}`, `{"task_id":%s,"delta":"d"}`, `{"task_id":"t","x":%s}`},
			func(e Envelope) {
				if _, err := fast.DecodeTaskChunk(e.Payload); err != nil { // as nodes' readFast reads
					_, _ = DecodeTaskChunk(e.Payload)
				}
			}},
		{"task_result", []string{
			`{"task_id":"t","status":"completed","result":%s}`, `{"task_id":%s,"status":"completed"}`,
			`{"task_id":"t","status":%s}`, `{"task_id":"t","status":"completed","processing_time_ms":%s}`,
			`{"task_id":"t","status":"completed","usage":%s}`, `{"task_id":"t","status":"completed","usage":{"prompt_tokens":%s}}`,
			`{"task_id":"t","status":"completed","x":%s}`},
			func(e Envelope) {
				if _, err := fast.DecodeTaskResult(e.Payload); err != nil {
					_, _ = DecodeTaskResult(e.Payload)
				}
			}},
		{"heartbeat", []string{`{"active_tasks":%s}`, `{"cpu_percent":%s}`, `{"x":%s}`},
			func(e Envelope) { _ = DecodeHeartbeat(e.Payload) }},
		{"benchmark_result", []string{`{"results":%s}`, `{"results":[{"prompt":%s}]}`, `{"results":[{"time_ms":%s}]}`, `{"x":%s}`},
			func(e Envelope) { _ = DecodeBenchmarkResult(e.Payload) }},
	}
	for _, r := range readers {
		for _, field := range r.fields {
			for _, s := range append(boundtest.Shapes(1<<20), boundtest.Shapes(19_000)...) {
				frame := []byte(`{"msg_type":"x","payload":` + strings.Replace(field, "%s", s.JSON, 1) + `}`)
				c := boundtest.Check(t, r.name+" "+field+" "+s.Name, frame, func(b []byte) {
					if e, err := fast.DecodeEnvelope(b); err == nil {
						r.read(e)
					}
				})
				if testing.Verbose() {
					t.Logf("%-16s %-70.70s %-22s %6.2f B/B", r.name, field, s.Name, float64(c.Alloc)/float64(len(frame)))
				}
			}
		}
	}
}
