package nodes

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

func TestDecodeRegister(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	caps := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("%q", fmt.Sprintf("c%d", i))
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	labels := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf(`"k%d":"v"`, i)
		}
		return "{" + strings.Join(s, ",") + "}"
	}
	ok := func(extra string) string {
		return `{"api_key":"gn_k","name":"n","capabilities":["echo"]` + extra + `}`
	}
	cases := []struct {
		name, in, wantErr string
	}{
		{"minimal", ok(""), ""},
		{"everything", ok(`,"languages":["en","pt-BR"],"model_info":{"gpu":"A100"},"max_concurrency":8`), ""},
		{"no key", `{"name":"n","capabilities":["echo"]}`, "api_key is required"},
		{"key too long", `{"api_key":"` + long(129) + `","name":"n","capabilities":["echo"]}`, "api_key is longer than 128"},
		{"key at limit", `{"api_key":"` + long(128) + `","name":"n","capabilities":["echo"]}`, ""},
		{"no name", `{"api_key":"k","capabilities":["echo"]}`, "name is required"},
		{"name at limit (runes)", `{"api_key":"k","name":"` + strings.Repeat("é", 64) + `","capabilities":["echo"]}`, ""},
		{"name too long", `{"api_key":"k","name":"` + long(65) + `","capabilities":["echo"]}`, "name is longer than 64"},
		{"no capabilities", `{"api_key":"k","name":"n","capabilities":[]}`, "at least one capability"},
		{"32 capabilities", `{"api_key":"k","name":"n","capabilities":` + caps(32) + `}`, ""},
		{"33 capabilities", `{"api_key":"k","name":"n","capabilities":` + caps(33) + `}`, "more than 32"},
		{"bad capability", ok(`,"capabilities":["-x"]`), "must match"},
		{"capability too long", ok(`,"capabilities":["` + long(65) + `"]`), "must match"},
		{"capability with dots", ok(`,"capabilities":["gemma3.4b_it-q4"]`), ""},
		{"language too long", ok(`,"languages":["` + long(17) + `"]`), "1-16 characters"},
		{"empty language", ok(`,"languages":[""]`), "1-16 characters"},
		{"model_info not object", ok(`,"model_info":[1]`), "model_info must be an object"},
		{"model_info at limit", ok(`,"model_info":{"x":"` + long(2040) + `"}`), ""},
		{"model_info too long", ok(`,"model_info":{"x":"` + long(2041) + `"}`), "longer than 2048"},
		{"max_concurrency zero", ok(`,"max_concurrency":0`), "from 1 to 1024"},
		{"max_concurrency float", ok(`,"max_concurrency":1.5`), "from 1 to 1024"},
		{"max_concurrency huge", ok(`,"max_concurrency":100000`), "from 1 to 1024"},
		{"max_concurrency string", ok(`,"max_concurrency":"8"`), "must be an integer from 1 to 1024"},
		{"max_concurrency bool", ok(`,"max_concurrency":true`), "must be an integer from 1 to 1024"},
		{"max_concurrency null", ok(`,"max_concurrency":null`), ""},
		{"max_concurrency exponent", ok(`,"max_concurrency":1e1`), "from 1 to 1024"},
		{"name with NUL", `{"api_key":"k","name":"a\u0000b","capabilities":["echo"]}`, "name must not contain control"},
		{"name with ESC", `{"api_key":"k","name":"\u001b[31mred","capabilities":["echo"]}`, "name must not contain control"},
		{"name with newline", `{"api_key":"k","name":"a\nb","capabilities":["echo"]}`, "name must not contain control"},
		{"name with RLO", `{"api_key":"k","name":"gpu\u202eevil","capabilities":["echo"]}`, "bidirectional-override"},
		{"name with RLI", `{"api_key":"k","name":"gpu\u2067x","capabilities":["echo"]}`, "bidirectional-override"},
		{"name with zero-width space", `{"api_key":"k","name":"ad\u200bmin","capabilities":["echo"]}`, "name must not contain"},
		{"name with line separator", `{"api_key":"k","name":"a\u2028b","capabilities":["echo"]}`, "name must not contain"},
		{"name with emoji and ZWJ", `{"api_key":"k","name":"👩\u200d💻 node-1 é","capabilities":["echo"]}`, ""},
		{"language with RLO", ok(`,"languages":["en\u202e"]`), "languages must not contain"},
		{"capabilities wrong type", `{"api_key":"k","name":"n","capabilities":"echo"}`, "capabilities must be an array"},
		{"features", ok(`,"features":["task_cancel"]`), ""},
		{"features unknown", ok(`,"features":["from-the-future","task_cancel"]`), ""},
		{"features null", ok(`,"features":null`), ""},
		{"features empty", ok(`,"features":[]`), ""},
		{"features wrong type", ok(`,"features":"task_cancel"`), "features must be an array"},
		{"features not strings", ok(`,"features":[1]`), "features must be a string"},
		{"features too many", ok(`,"features":` + caps(33)), "features has more than 32"},
		{"feature empty", ok(`,"features":[""]`), "each feature must be 1-64 characters"},
		{"feature too long", ok(`,"features":["` + long(65) + `"]`), "each feature must be 1-64 characters"},
		{"version and labels", ok(`,"version":"2.1.0-rc.1","labels":{"region":"eu-west","gpu.model":"a100","zone_2":"b"}`), ""},
		{"version at limit", ok(`,"version":"` + long(64) + `"`), ""},
		{"version too long", ok(`,"version":"` + long(65) + `"`), "version is longer than 64"},
		{"version with ESC", ok(`,"version":"1\u001b[2J"`), "version must not contain control"},
		{"version not a string", ok(`,"version":2`), "version must be a string"},
		{"labels null", ok(`,"labels":null`), ""},
		{"labels not an object", ok(`,"labels":["region"]`), "labels must be a"},
		{"label value not a string", ok(`,"labels":{"gpus":2}`), "must be a string"},
		{"label key upper case", ok(`,"labels":{"Region":"eu"}`), "key \"Region\" must match"},
		{"label key empty", ok(`,"labels":{"":"eu"}`), "must match"},
		{"label key too long", ok(`,"labels":{"` + long(64) + `":"eu"}`), "must match"},
		{"label value empty", ok(`,"labels":{"region":""}`), "the value of \"region\" must be 1-128 characters"},
		{"label value too long", ok(`,"labels":{"region":"` + long(129) + `"}`), "must be 1-128 characters"},
		{"label value with RLO", ok(`,"labels":{"region":"eu\u202e"}`), "bidirectional-override"},
		{"16 labels", ok(`,"labels":` + labels(16)), ""},
		{"17 labels", ok(`,"labels":` + labels(17)), "labels has more than 16 labels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeRegister(json.RawMessage(c.in))
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.wantErr != "" && (err == nil || !errors.Is(err, wire.ErrInvalidMessage) || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("got %v; want an error containing %q", err, c.wantErr)
			}
		})
	}
}

func TestDecodeRegisterDefaults(t *testing.T) {
	r, err := DecodeRegister(json.RawMessage(`{"api_key":"k","name":"n","capabilities":["a","b","a"],"model_info":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(r.ModelInfo) != "{}" || len(r.Languages) != 0 || r.Languages == nil || r.MaxConcurrency != 0 || r.TaskCancel {
		t.Fatalf("defaults: %+v", r)
	}
	if strings.Join(r.Capabilities, ",") != "a,b" {
		t.Fatalf("duplicate capabilities kept: %v", r.Capabilities)
	}
	if r.Version != "" || r.Labels != nil {
		t.Fatalf("a node that declared neither has version %q, labels %v", r.Version, r.Labels)
	}
	r, err = DecodeRegister(json.RawMessage(`{"api_key":"k","name":"n","capabilities":["a"],"version":"1.2","labels":{"region":"eu"}}`))
	if err != nil || r.Version != "1.2" || len(r.Labels) != 1 || r.Labels["region"] != "eu" {
		t.Fatalf("declared version 1.2 and region=eu: %+v, %v", r, err)
	}
}

// task_cancel is sent only to a node that asked for it in features;
// names this version does not know are ignored.
func TestDecodeRegisterFeatures(t *testing.T) {
	for in, want := range map[string]bool{
		``:                                     false, // GemmaNet's SDK sends no features
		`,"features":[]`:                       false,
		`,"features":["future"]`:               false,
		`,"features":["future","task_cancel"]`: true,
		`,"features":["task_cancel"]`:          true,
		`,"features":["TASK_CANCEL"]`:          false,
	} {
		r, err := DecodeRegister(json.RawMessage(`{"api_key":"k","name":"n","capabilities":["a"]` + in + `}`))
		if err != nil || r.TaskCancel != want {
			t.Errorf("%s: TaskCancel %v, %v; want %v", in, r.TaskCancel, err, want)
		}
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

// FuzzDecodeRegister feeds arbitrary frames through the handshake's
// reading of the first message: the envelope (wire.DecodeEnvelope), then
// node_register's rules. Nothing may panic, every error must be of the
// documented kind, and a registration accepted must keep the rules.
func FuzzDecodeRegister(f *testing.F) {
	for _, s := range []string{
		`{"msg_type":"node_register","payload":{"api_key":"gn_x","name":"n","capabilities":["echo"],"languages":["en"],"model_info":{"m":1},"max_concurrency":4}}`,
		`{"msg_type":"node_register","payload":{"api_key":"k","name":"n","capabilities":["a","a"],"model_info":null,"features":["task_cancel","later"]}}`,
		`{"msg_type":"node_register","payload":{"api_key":"k","name":"n\u202e","capabilities":["a"]}}`,
		`{"msg_type":"node_register","payload":{"api_key":"k","name":"n","capabilities":["a"],"max_concurrency":"8"}}`,
		`{"msg_type":"node_register","payload":{"api_key":"k","name":"n","capabilities":["a"],"model_info":[1]}}`,
		`{"msg_type":"node_register","payload":{"api_key":"k","name":"n","capabilities":["a"],"version":"1.0","labels":{"region":"eu","Gpu":"x"}}}`,
		`{"msg_type":"heartbeat","payload":{}}`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := wire.DecodeEnvelope(b)
		if err != nil {
			return // wire.FuzzDecodeNodeMessage's business
		}
		reg, err := DecodeRegister(m.Payload)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidMessage) {
				t.Fatalf("DecodeRegister error of the wrong kind: %v", err)
			}
			return
		}
		if reg.APIKey == "" || reg.Name == "" || len(reg.Capabilities) == 0 || reg.ModelInfo[0] != '{' {
			t.Fatalf("accepted an invalid registration: %+v", reg)
		}
		if reg.MaxConcurrency < 0 || reg.MaxConcurrency > MaxNodeConcurrency {
			t.Fatalf("max_concurrency %d out of range", reg.MaxConcurrency)
		}
		if CheckLabels("labels", reg.Labels) != nil || !displayable(reg.Version) || utf8.RuneCountInString(reg.Version) > maxVersionChars {
			t.Fatalf("accepted version %q, labels %v", reg.Version, reg.Labels)
		}
		if !displayable(reg.Name) || utf8.RuneCountInString(reg.Name) > maxNameChars {
			t.Fatalf("accepted the name %q", reg.Name)
		}
	})
}
