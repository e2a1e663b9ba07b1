package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/boundtest"
)

// Every decoder of an HTTP body, fed the worst JSON of about 1 MB in each
// of its fields and in a field it does not know: refused or read within
// boundtest's bounds, in stack and in bytes allocated per byte of input
// (invariant 16).
func TestBodyDecodersAreBounded(t *testing.T) {
	decoders := []struct {
		name   string
		fields []string // where a hostile value goes, "%s" in the body
		read   func([]byte)
	}{
		{"task body", []string{
			`{"task_type":"echo","content":"a","x":%s}`,
			`{"task_type":"echo","content":%s}`,
			`{"task_type":%s,"content":"a"}`,
			`{"task_type":"echo","content":"a","params":%s}`,
			`{"task_type":"echo","content":"a","params":{"p":%s}}`,
			`{"task_type":"echo","content":"a","node_labels":%s}`,
			`{"task_type":"echo","content":"a","api_key":%s}`,
		}, func(b []byte) { _, _ = parseTaskBody(b) }},
		{"async extras", []string{
			`{"webhook_url":%s}`, `{"ttl":%s}`, `{"x":%s}`,
		}, func(b []byte) { _, _ = parseAsyncExtras(b) }},
		{"chat body", []string{
			`{"model":"m","messages":[{"role":"user","content":"a"}],"x":%s}`,
			`{"model":%s,"messages":[{"role":"user","content":"a"}]}`,
			`{"model":"m","messages":%s}`,
			`{"model":"m","messages":[{"role":"user","content":%s}]}`,
			`{"model":"m","messages":[{"role":%s,"content":"a"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":%s}`,
			`{"model":"m","messages":[{"role":"user","content":"a"}],"stream_options":%s}`,
			`{"model":"m","messages":[{"role":"user","content":"a"}],"user":%s}`,
		}, func(b []byte) { _, _ = parseChatBody(b) }},
		{"completions body", []string{
			`{"model":"m","prompt":"a","x":%s}`,
			`{"model":"m","prompt":%s}`,
			`{"model":%s,"prompt":"a"}`,
			`{"model":"m","prompt":"a","temperature":%s}`,
		}, func(b []byte) { _, _ = parseTextBody(b) }},
		{"embeddings body", []string{
			`{"model":"m","input":"a","x":%s}`,
			`{"model":"m","input":%s}`,
			`{"model":"m","input":"a","encoding_format":%s}`,
		}, func(b []byte) { _, _ = parseEmbedBody(b) }},
		// POST /api/v1/rate and /api/v1/register. (PUT /admin/api/keys/…
		// /limits reads a list of task types, but only the operator's
		// token reaches it.)
		{"rate, register", []string{`{"task_id":%s,"rating":1}`, `{"task_id":"t","rating":%s}`, `{"email":%s}`},
			func(b []byte) {
				var v struct {
					TaskID *string `json:"task_id"`
					Rating *int    `json:"rating"`
					Email  *string `json:"email"`
				}
				_ = decodeObject(b, &v)
			}},
	}
	// A hostile value in each of a chat's 500 messages: what one costs,
	// 500 times over.
	for _, s := range boundtest.Shapes(2000) {
		msg := `{"role":"user","content":` + s.JSON + `}`
		in := []byte(`{"model":"m","messages":[` + strings.Repeat(msg+",", maxChatMessages-1) + msg + `]}`)
		boundtest.Check(t, "chat body, 500 messages of "+s.Name, in, func(b []byte) { _, _ = parseChatBody(b) })
	}
	for _, d := range decoders {
		for _, field := range d.fields {
			for _, s := range slices.Concat(boundtest.Shapes(1<<20), boundtest.Shapes(19_000)) {
				in := []byte(strings.Replace(field, "%s", s.JSON, 1))
				c := boundtest.Check(t, d.name+" "+field+" "+s.Name, in, d.read)
				if testing.Verbose() {
					t.Logf("%-18s %-70.70s %-22s %5.2f B/B stack %d", d.name, field, s.Name, float64(c.Alloc)/float64(len(in)), c.Stack)
				}
			}
		}
	}
}
