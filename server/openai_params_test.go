package server

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// fullChatBody is a chat completion with every field OpenAI documents for
// it, and a conversation with every kind of message and content part.
func fullChatBody(model string) map[string]any {
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string", "description": "a <city> & its country"},
		"days": map[string]any{"type": "array", "items": map[string]any{"type": "integer", "minimum": 1}},
	}, "required": []any{"city"}, "additionalProperties": false}
	return map[string]any{
		"model": model,
		"messages": []any{
			map[string]any{"role": "developer", "content": "answer in JSON", "name": "dev"},
			map[string]any{"role": "system", "content": []any{map[string]any{"type": "text", "text": "be brief"}}},
			map[string]any{"role": "user", "name": "alice", "content": []any{
				map[string]any{"type": "text", "text": "what is in "},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
				map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": "UklGRg==", "format": "wav"}},
				map[string]any{"type": "file", "file": map[string]any{"file_data": "JVBERi0=", "filename": "a.pdf"}},
				map[string]any{"type": "text", "text": "these?"},
			}},
			map[string]any{"role": "assistant", "content": nil, "refusal": nil, "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function", "function": map[string]any{"name": "weather", "arguments": `{"city":"Oslo"}`},
			}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": `{"temp":3}`},
			map[string]any{"role": "assistant", "content": "", "refusal": "I cannot"},
			map[string]any{"role": "user", "content": "and tomorrow?"},
		},
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "weather", "description": "the weather", "parameters": schema, "strict": true,
		}}},
		"tool_choice":           map[string]any{"type": "function", "function": map[string]any{"name": "weather"}},
		"parallel_tool_calls":   false,
		"response_format":       map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer", "schema": schema, "strict": true}},
		"stop":                  []any{"\n\n", "END"},
		"seed":                  float64(1 << 53),
		"top_p":                 0.9,
		"temperature":           0.2,
		"presence_penalty":      -0.5,
		"frequency_penalty":     1.5,
		"logprobs":              true,
		"top_logprobs":          5,
		"n":                     1,
		"logit_bias":            map[string]any{"50256": -100},
		"user":                  "user-1",
		"safety_identifier":     "s-1",
		"prompt_cache_key":      "conv-1",
		"metadata":              map[string]any{"team": "x"},
		"max_tokens":            64,
		"max_completion_tokens": 100,
		"stream_options":        map[string]any{"include_usage": true},
		"modalities":            []any{"text"},
		"audio":                 map[string]any{"voice": "alloy", "format": "mp3"},
		"reasoning_effort":      "low",
		"verbosity":             "low",
		"service_tier":          "auto",
		"store":                 false,
		"prediction":            map[string]any{"type": "content", "content": "<b>draft</b>"},
		"web_search_options":    map[string]any{"search_context_size": "low"},
		"function_call":         "auto",
		"functions":             []any{map[string]any{"name": "old", "parameters": schema}},
	}
}

// withoutConsumed is a body as its node's params: without model and stream.
func withoutConsumed(body map[string]any) map[string]any {
	p := map[string]any{}
	for k, v := range body {
		if k != "model" && k != "stream" {
			p[k] = v
		}
	}
	return p
}

// Every field a client sends, and every field of every message, reaches
// the node in params as sent; content is still the flattened
// conversation.
func TestOpenAIChatParamsReachTheNode(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "chat"))
	for _, stream := range []bool{false, true} {
		body := fullChatBody("gemmanet/chat")
		body["stream"] = stream
		var ch <-chan chatReply
		var sse <-chan sseReply
		if stream {
			sse = ta.streamAsync(t.Context(), key, body)
		} else {
			ch = ta.chatAsync(key, body)
		}
		m := nextTask(t, n)
		// The last system message's text parts and the last user message.
		if want := "System: be brief\n\nUser: and tomorrow?"; m.Payload["content"] != want {
			t.Errorf("stream %v: content %q, want %q", stream, m.Payload["content"], want)
		}
		var want any
		raw, _ := json.Marshal(withoutConsumed(body))
		_ = json.Unmarshal(raw, &want)
		if !reflect.DeepEqual(m.Payload["params"], want) {
			got, _ := json.Marshal(m.Payload["params"])
			t.Errorf("stream %v: params\n %s\nwant\n %s", stream, got, raw)
		}
		if m.Payload["stream"] != stream {
			t.Errorf("stream %v: the task_assign says stream %v", stream, m.Payload["stream"])
		}
		n.Result(m.TaskID(), "completed", "ok")
		if stream {
			r := waitFor(t, sse, 5*time.Second)
			r.check(t)
		} else if r := waitFor(t, ch, 5*time.Second); r.code != 200 {
			t.Errorf("HTTP %d %s", r.code, r.body)
		}
	}
}

// A node that reads only content, as GemmaNet's do, answers a chat
// completion that sends tools and parts as it answered one that did not.
func TestOpenAIChatContentOnlyNode(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	node := runSDKNode(t, ta, sdk.NodeConfig{
		APIKey: key, Name: "gemmanet-style", Capabilities: []string{"chat"}, MaxConcurrency: 1,
		Handler: sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
			return sdk.Result{Text: "you said: " + task.Content}, nil
		}),
	})
	node.WaitRegistered(t, 5*time.Second)
	var c completion
	if code, _ := ta.call(t, "POST", "/v1/chat/completions", key, fullChatBody("gemmanet/chat"), &c); code != 200 || len(c.Choices) != 1 {
		t.Fatalf("HTTP %d %+v", code, c)
	}
	if got, want := c.Choices[0].Message.Content, "you said: System: be brief\n\nUser: and tomorrow?"; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
}

// nestedValue is a value whose innermost object is at level depth when
// the body holding it is level 1 (a member of the body is level 2).
func nestedValue(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "1" + strings.Repeat("}", depth-1)
}

// chatWith is a valid chat body with extra members (`"k":v,…`).
func chatWith(members string) string {
	return `{"model":"gemmanet/chat","messages":[{"role":"user","content":"hi"}],` + members + `}`
}

// paddedPrediction is a chat body whose params, as a node is sent them,
// are exactly size bytes: a prediction of '<' (6 bytes each once escaped)
// and 'a's.
func paddedPrediction(t *testing.T, size int) string {
	t.Helper()
	base, err := chatParamsOf([]byte(chatWith(`"prediction":{"type":"content","content":""}`)))
	if err != nil {
		t.Fatal(err)
	}
	rest := size - len(base)
	return chatWith(`"prediction":{"type":"content","content":"` + strings.Repeat("<", rest/6) + strings.Repeat("a", rest%6) + `"}`)
}

// Each bound of a chat completion's params: the body at the bound passes
// and its params are what the node is sent; one past it is refused, with
// an error naming the field.
func TestChatParamBounds(t *testing.T) {
	keys := func(n int) string { // n fields in all, with model and messages
		var b strings.Builder
		for i := range n - 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"x` + strings.Repeat("x", i) + `":0`)
		}
		return b.String()
	}
	cases := []struct {
		name      string
		ok, over  string
		overError string // in the refusal's message
	}{
		{"fields", chatWith(keys(maxChatParamKeys)), chatWith(keys(maxChatParamKeys + 1)), "at most 64 keys"},
		{"depth", chatWith(`"response_format":` + nestedValue(maxChatParamDepth)), chatWith(`"response_format":` + nestedValue(maxChatParamDepth+1)),
			"response_format must not nest deeper than 32 levels"},
		{"depth in a message", `{"messages":[{"role":"user","content":[` + nestedValue(maxChatParamDepth-3) + `]}]}`,
			`{"messages":[{"role":"user","content":[` + nestedValue(maxChatParamDepth-2) + `]}]}`, "messages must not nest deeper than 32 levels"},
		{"integer", chatWith(`"seed":9007199254740992`), chatWith(`"seed":9007199254740993`), "integers in seed must be between -2^53 and 2^53"},
		{"negative integer", chatWith(`"logit_bias":{"1":-9007199254740992}`), chatWith(`"logit_bias":{"1":-9007199254740993}`), "integers in logit_bias"},
		{"float", chatWith(`"top_p":1.7e308`), chatWith(`"top_p":1.8e309`), "numbers in top_p must fit a 64-bit float"},
		{"key", chatWith(`"top_p":1`), chatWith(`"top-p":1`), `field "top-p" must be an identifier`},
		{"content key", chatWith(`"contents":1`), chatWith(`"content":1`), `field "content" must be an identifier`},
		{"UTF-8", chatWith(`"tools":[{"type":"function","function":{"name":"f","description":"é"}}]`),
			chatWith("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"\xe9\"}}]"), "valid UTF-8"},
		{"size", paddedPrediction(t, maxChatParamBytes), paddedPrediction(t, maxChatParamBytes+1), "must be at most 4194304 bytes as JSON"},
	}
	for _, c := range cases {
		b, err := parseChatBody([]byte(c.ok))
		if err != nil {
			t.Errorf("%s: at the bound: %v", c.name, err)
		} else {
			var params, body map[string]any
			if json.Unmarshal(b.Params, &params) != nil || json.Unmarshal([]byte(c.ok), &body) != nil ||
				!reflect.DeepEqual(params, withoutConsumed(body)) {
				t.Errorf("%s: params %.200s are not the body without model", c.name, b.Params)
			}
			if len(b.Params) > maxChatParamBytes {
				t.Errorf("%s: %d bytes of params", c.name, len(b.Params))
			}
		}
		_, err = parseChatBody([]byte(c.over))
		if !errors.Is(err, errInvalidBody) || !strings.Contains(err.Error(), c.overError) {
			t.Errorf("%s: past the bound: %v, want an invalid body saying %q", c.name, err, c.overError)
		}
	}
}

// Through HTTP: the largest params reach the node as sent (escaped), and
// one byte more is 422 in OpenAI's shape, naming the rule.
func TestOpenAIChatParamsSize(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "chat"))
	body := paddedPrediction(t, maxChatParamBytes)
	ch := ta.chatAsync(key, body)
	m := nextTask(t, n)
	var want map[string]any
	_ = json.Unmarshal([]byte(body), &want)
	if !reflect.DeepEqual(m.Payload["params"], withoutConsumed(want)) {
		t.Errorf("the largest params did not reach the node as sent")
	}
	n.Result(m.TaskID(), "completed", "ok")
	if r := waitFor(t, ch, 5*time.Second); r.code != 200 {
		t.Errorf("HTTP %d %.300s", r.code, r.body)
	}
	code, raw, _, err := ta.do("POST", "/v1/chat/completions", key, paddedPrediction(t, maxChatParamBytes+1))
	if err != nil {
		t.Fatal(err)
	}
	e := checkOpenAIError(t, "params one byte over", code, raw, 422, "invalid_request_error", "invalid_request")
	if !strings.Contains(e.Error.Message, "4194304 bytes") {
		t.Errorf("message %q does not name the bound", e.Error.Message)
	}
}
