package nodes

import (
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/boundtest"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// node_register is read before its key is checked, from anyone who opens
// the socket: fed the worst JSON in each of its fields and in one it does
// not know, it is refused or read within boundtest's bounds (invariant 16),
// as the hub reads a first frame: the envelope (wire.CheckBounds), then it.
func TestDecodeRegisterIsBounded(t *testing.T) {
	fields := []string{
		`{"api_key":%s,"name":"n","capabilities":["echo"]}`,
		`{"api_key":"k","name":%s,"capabilities":["echo"]}`,
		`{"api_key":"k","name":"n","capabilities":%s}`,
		`{"api_key":"k","name":"n","capabilities":["echo"],"languages":%s}`,
		`{"api_key":"k","name":"n","capabilities":["echo"],"model_info":%s}`,
		`{"api_key":"k","name":"n","capabilities":["echo"],"model_info":{"m":%s}}`,
		`{"api_key":"k","name":"n","capabilities":["echo"],"max_concurrency":%s}`,
		`{"api_key":"k","name":"n","capabilities":["echo"],"features":%s}`,
		`{"api_key":"k","name":"n","capabilities":["echo"],"version":%s}`,
		`{"api_key":"k","name":"n","capabilities":["echo"],"labels":%s}`,
		`{"api_key":"k","name":"n","capabilities":["echo"],"x":%s}`,
	}
	for _, field := range fields {
		for _, s := range slices.Concat(boundtest.Shapes(1<<20), boundtest.Shapes(19_000)) {
			in := []byte(`{"msg_type":"node_register","payload":` + strings.Replace(field, "%s", s.JSON, 1) + `}`)
			c := boundtest.Check(t, field+" "+s.Name, in, func(b []byte) {
				if m, err := wire.DecodeEnvelope(b); err == nil { // as the hub reads a first frame
					_, _ = DecodeRegister(m.Payload)
				}
			})
			if testing.Verbose() {
				t.Logf("%-80.80s %-22s %6.2f B/B", field, s.Name, float64(c.Alloc)/float64(len(in)))
			}
		}
	}
}
