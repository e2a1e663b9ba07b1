package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Completions and embeddings over raw sockets: the task type the model
// names, what the node receives, the answers' shapes, and the errors.
func TestOpenAICompletionsAndEmbeddings(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "completion", "embedding", "echo"))
	post := func(path string, body any) <-chan reply {
		return async(func() reply {
			code, b, _, err := ta.do(http.MethodPost, path, key, body)
			return reply{code, b, err}
		})
	}
	result := func(taskID, text string, prompt, completion int) {
		n.MustSend("task_result", map[string]any{"task_id": taskID, "node_id": n.ID, "status": "completed",
			"result": text, "processing_time_ms": 1, "usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": completion}})
	}

	t.Run("completion, default task type", func(t *testing.T) {
		ch := post("/v1/completions", map[string]any{"model": "gpt-3.5-turbo-instruct", "prompt": []string{"once upon"}, "max_tokens": 5})
		m := nextTask(t, n)
		if m.Payload["task_type"] != "completion" || m.Payload["content"] != "once upon" {
			t.Errorf("the node got %v", m.Payload)
		}
		if p, _ := m.Payload["params"].(map[string]any); p["prompt"] != "once upon" || p["max_tokens"] != 5.0 {
			t.Errorf("params %v", m.Payload["params"])
		}
		result(m.TaskID(), " a time", 2, 3)
		r := waitFor(t, ch, 5*time.Second)
		var got struct {
			Object  string `json:"object"`
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage usageJSON `json:"usage"`
		}
		r.decode(t, &got)
		if got.Object != "text_completion" || len(got.Choices) != 1 || got.Choices[0].Text != " a time" ||
			got.Choices[0].FinishReason == nil || *got.Choices[0].FinishReason != "stop" || got.Usage != (usageJSON{2, 3, 5}) {
			t.Errorf("answer %+v", got)
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		for _, c := range []struct {
			input  any
			answer string
			want   string
		}{
			{"one", `[1, 2]`, `[[1,2]]`},
			{[]string{"a", "b"}, `[[1],[2]]`, `[[1],[2]]`},
		} {
			ch := post("/v1/embeddings", map[string]any{"model": "text-embedding-3-small", "input": c.input})
			m := nextTask(t, n)
			if m.Payload["task_type"] != "embedding" {
				t.Errorf("task type %v", m.Payload["task_type"])
			}
			result(m.TaskID(), c.answer, 4, 0)
			r := waitFor(t, ch, 5*time.Second)
			var got struct {
				Data []struct {
					Index     int       `json:"index"`
					Embedding []float64 `json:"embedding"`
				} `json:"data"`
				Usage map[string]int64 `json:"usage"`
			}
			r.decode(t, &got)
			var vecs [][]float64
			for i, d := range got.Data {
				if d.Index != i {
					t.Errorf("index %d at %d", d.Index, i)
				}
				vecs = append(vecs, d.Embedding)
			}
			if b, _ := json.Marshal(vecs); string(b) != c.want || got.Usage["prompt_tokens"] != 4 || got.Usage["total_tokens"] != 4 {
				t.Errorf("input %v: vectors %s usage %v, want %s and 4 tokens", c.input, b, got.Usage, c.want)
			}
		}
	})

	t.Run("a node's answer that is no embedding is 502", func(t *testing.T) {
		for _, answer := range []string{`hello`, `[[1],[2]]`, `[[]]`, `[]`} {
			ch := post("/v1/embeddings", map[string]any{"model": "text-embedding-3-small", "input": "x"})
			m := nextTask(t, n)
			n.Result(m.TaskID(), "completed", answer)
			r := waitFor(t, ch, 5*time.Second)
			if r.code != http.StatusBadGateway || !strings.Contains(string(r.body), "not an embedding") {
				t.Errorf("answer %q: %d %s, want 502 naming the answer", answer, r.code, r.body)
			}
		}
	})

	for _, c := range []struct{ path, body, want string }{
		{"/v1/completions", `{"prompt":"x"}`, "model is required"},
		{"/v1/completions", `{"model":"m"}`, "prompt is required"},
		{"/v1/completions", `{"model":"m","prompt":["a","b"]}`, "a list of one string"},
		{"/v1/completions", `{"model":"m","prompt":[1,2]}`, "a string or a list of strings"},
		{"/v1/completions", `{"model":"m","prompt":"x","stream":true,"stream_options":true}`, "stream_options"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":1}}`, "stream_options"},
		{"/v1/embeddings", `{"model":"m","input":[]}`, "input must have"},
		{"/v1/embeddings", `{"model":"m","input":"x","encoding_format":"int8"}`, "encoding_format"},
		{"/v1/embeddings", `{"model":"gemmanet/` + strings.Repeat("e", 65) + `","input":"x"}`, "must be 1-64 characters"},
		{"/v1/completions", `{"model":"gemmanet/c\u0000","prompt":"x"}`, "control characters"},
		{"/v1/completions", `{"model":"m","prompt":"x","max_tokens":-5}`, "max_tokens must be an integer of at least 1"},
	} {
		code, raw, _, err := ta.do("POST", c.path, key, c.body)
		var e openAIError
		if err != nil || code != http.StatusUnprocessableEntity || json.Unmarshal(raw, &e) != nil ||
			e.Error.Code != string(CodeInvalidRequest) || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s %s: %d %s (%v), want 422 invalid_request saying %q", c.path, c.body, code, raw, err, c.want)
		}
	}
}

func FuzzParseTextBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hi"}`, `{"model":"m","prompt":["hi"],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","prompt":[1]}`, `{"model":"m","prompt":"x","max_tokens":1.5}`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := parseTextBody(data)
		if err != nil {
			if !errors.Is(err, errInvalidBody) && !errors.Is(err, errContextLength) {
				t.Fatalf("error of the wrong kind: %v", err)
			}
			return
		}
		if utf8.RuneCountInString(b.Prompt) > maxContentChars {
			t.Fatalf("a prompt of %d characters accepted", utf8.RuneCountInString(b.Prompt))
		}
	})
}

func FuzzParseEmbedBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`, `{"model":"m","input":["a","b"],"encoding_format":"base64"}`,
		`{"model":"m","input":[]}`, `{"model":"m","input":[[1,2]]}`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := parseEmbedBody(data)
		if err != nil {
			if !errors.Is(err, errInvalidBody) && !errors.Is(err, errContextLength) {
				t.Fatalf("error of the wrong kind: %v", err)
			}
			return
		}
		if len(b.Input) < 1 || len(b.Input) > maxEmbedInput {
			t.Fatalf("%d inputs accepted", len(b.Input))
		}
	})
}

// An alias tries its task types in order, the next only when no node
// serves the one before; each attempt is a task of its own, and a target
// whose node fails is not passed over.
func TestOpenAIModelAliasFallback(t *testing.T) {
	ta := startApp(t, func(c *Config) {
		c.ModelAliases = map[string][]string{"house": {"nowhere", "echo"}, "gone": {"nowhere", "neither"}}
	})
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "echo"))

	ch := ta.chatAsync(key, map[string]any{"model": "house", "messages": userMsg("hi")})
	m := nextTask(t, n)
	if m.Payload["task_type"] != "echo" {
		t.Errorf("the node got a task of type %v", m.Payload["task_type"])
	}
	n.Result(m.TaskID(), "completed", "hello")
	r := waitFor(t, ch, 5*time.Second)
	if r.code != http.StatusOK || !strings.Contains(string(r.body), `"model":"house"`) || !strings.Contains(string(r.body), m.TaskID()) {
		t.Errorf("through the alias: %d %s, want 200 naming the alias and the echo task", r.code, r.body)
	}
	// Nothing serves either target: the last one's 503.
	code, raw, _, err := ta.do("POST", "/v1/chat/completions", key, map[string]any{"model": "gone", "messages": userMsg("hi")})
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(string(raw), "no_node_available") {
		t.Errorf("no target served: %d %s %v", code, raw, err)
	}
	// A failure of the first served target is the answer, not a reason to
	// try the next.
	ch = ta.chatAsync(key, map[string]any{"model": "house", "messages": userMsg("hi")})
	m = nextTask(t, n)
	n.Result(m.TaskID(), "failed", "broken")
	if r := waitFor(t, ch, 5*time.Second); r.code != http.StatusBadGateway {
		t.Errorf("a node failure through the alias: %d %s, want 502", r.code, r.body)
	}
}

func TestParseModelAliases(t *testing.T) {
	got, err := ParseModelAliases(" fast = a, b ;smart=c;;")
	if err != nil || len(got) != 2 || strings.Join(got["fast"], ",") != "a,b" || strings.Join(got["smart"], ",") != "c" {
		t.Errorf("ParseModelAliases = %v, %v", got, err)
	}
	if got, err := ParseModelAliases(""); err != nil || got != nil {
		t.Errorf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"fast", "=a", "fast=", "fast= , ", "a=b;a=c"} {
		if _, err := ParseModelAliases(bad); err == nil {
			t.Errorf("ParseModelAliases(%q) took it", bad)
		}
	}
	if err := (Config{ModelAliases: map[string][]string{"x": {}}}).withDefaults().Validate(); err == nil ||
		!strings.Contains(err.Error(), "--model-aliases") {
		t.Errorf("an alias without task types: %v", err)
	}
}
