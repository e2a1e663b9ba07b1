package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/sdk"
)

// openAIError is the OpenAI error shape; Detail must stay empty, since
// /v1 errors are not /api/v1's.
type openAIError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
	Detail *string `json:"detail"`
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage map[string]int64 `json:"usage"`
}

// chatReply is the answer to a plain chat completion.
type chatReply struct {
	reply
	header http.Header
}

// chatAsync posts a chat completion from a goroutine.
func (ta *testApp) chatAsync(key string, body any) <-chan chatReply {
	return async(func() chatReply {
		code, b, h, err := ta.do(http.MethodPost, "/v1/chat/completions", key, body)
		return chatReply{reply{code, b, err}, h}
	})
}

// nextTask returns the node's next task_assign, passing over what the
// server may send between tasks (benchmark probes).
func nextTask(t *testing.T, n *wireNode) nodetest.Msg {
	t.Helper()
	for {
		m := n.Recv(5 * time.Second)
		switch m.MsgType {
		case "task_assign":
			return m
		case "benchmark":
			continue
		}
		t.Fatalf("node got %s %v, want task_assign", m.MsgType, m.Payload)
	}
}

func userMsg(s string) []map[string]any { return []map[string]any{{"role": "user", "content": s}} }

// checkOpenAIError fails unless the answer is OpenAI's error shape with
// this status, type and code.
func checkOpenAIError(t *testing.T, what string, code int, body []byte, status int, typ, errCode string) openAIError {
	t.Helper()
	var e openAIError
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%s: HTTP %d body %q: %v", what, code, body, err)
	}
	if code != status || e.Error.Type != typ || e.Error.Code != errCode || e.Error.Message == "" || e.Detail != nil {
		t.Errorf("%s: HTTP %d %s; want %d type %q code %q, a message and no detail", what, code, body, status, typ, errCode)
	}
	return e
}

func TestModelCapability(t *testing.T) {
	for model, want := range map[string]string{
		"gemmanet/echo":      "echo",
		"GemmaNet/echo":      "echo",
		"  gemmanet/echo \n": "echo",
		"gemmanet/Echo":      "Echo", // the prefix is case-insensitive, the capability is not
		"gemmanet/auto":      "chat",
		"gemmanet/AUTO":      "chat",
		"gemmanet/":          "chat",
		"gemmanet":           "chat",
		"gpt-4":              "chat",
		"":                   "chat",
		"openai/echo":        "chat",
		"gemmanet/a/b":       "a/b",
	} {
		if got := modelCapability(model); got != want {
			t.Errorf("modelCapability(%q) = %q, want %q", model, got, want)
		}
	}
}

// The model names a capability; the answer repeats the model as sent.
func TestOpenAIModelRouting(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "echo", "chat"))
	for _, c := range []struct {
		model   any // nil: no model field
		capab   string
		echoed  string
		comment string
	}{
		{"gemmanet/echo", "echo", "gemmanet/echo", ""},
		{"GEMMANET/echo", "echo", "GEMMANET/echo", ""},
		{"gemmanet/auto", "chat", "gemmanet/auto", ""},
		{"gpt-4", "chat", "gpt-4", ""},
		{"", "chat", "", ""},
		{nil, "chat", "gemmanet/auto", "an absent model is gemmanet/auto"},
	} {
		body := map[string]any{"messages": userMsg("hi")}
		if c.model != nil {
			body["model"] = c.model
		}
		ch := ta.chatAsync(key, body)
		m := nextTask(t, n)
		if tt := m.Payload["task_type"]; tt != c.capab {
			t.Errorf("model %v: task_type %v, want %s", c.model, tt, c.capab)
		}
		n.Result(m.TaskID(), "completed", "ok")
		r := waitFor(t, ch, 5*time.Second)
		var out completion
		r.decode(t, &out)
		if r.code != 200 || out.Model != c.echoed {
			t.Errorf("model %v: HTTP %d model %q, want 200 %q %s", c.model, r.code, out.Model, c.echoed, c.comment)
		}
	}
}

// A multi-turn conversation reaches the node as the flattened content and
// the whole conversation, as sent, in params.
func TestOpenAIContentAndParams(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "chat"))
	parts := []any{
		map[string]any{"type": "text", "text": "look at "},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/x.png"}},
		map[string]any{"type": "text", "text": "this"},
		map[string]any{"type": "text", "text": 7}, // not text: skipped
		"stray", // not a part: skipped
	}
	cases := []struct {
		name    string
		body    map[string]any
		content string
		params  string
	}{
		{
			name: "system, turns, parts, null, settings",
			body: map[string]any{"model": "gemmanet/chat", "max_tokens": 50, "temperature": 0.5, "messages": []map[string]any{
				{"role": "system", "content": "be brief"},
				{"role": "user", "content": "q1"},
				{"role": "assistant", "content": "a1"},
				{"role": "system", "content": "be very brief"},
				{"role": "assistant", "content": nil},
				{"role": "user", "content": parts},
				{"role": "tool"},
			}},
			content: "System: be very brief\n\nUser: look at this",
			// The messages as sent: parts, nulls and all.
			params: `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"q1"},` +
				`{"role":"assistant","content":"a1"},{"role":"system","content":"be very brief"},` +
				`{"role":"assistant","content":null},{"role":"user","content":[{"type":"text","text":"look at "},` +
				`{"type":"image_url","image_url":{"url":"https://example.com/x.png"}},{"type":"text","text":"this"},` +
				`{"type":"text","text":7},"stray"]},{"role":"tool"}],` +
				`"max_tokens":50,"temperature":0.5}`,
		},
		{
			name:    "no system message, no settings",
			body:    map[string]any{"messages": []map[string]any{{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}}},
			content: "three",
			params:  `{"messages":[{"role":"user","content":"one"},{"role":"assistant","content":"two"},{"role":"user","content":"three"}]}`,
		},
		{
			name:    "system only, max_tokens 100.0, null temperature",
			body:    map[string]any{"max_tokens": 100.0, "temperature": nil, "messages": []map[string]any{{"role": "system", "content": "s"}}},
			content: "System: s\n\nUser: ",
			params:  `{"messages":[{"role":"system","content":"s"}],"max_tokens":100,"temperature":null}`,
		},
		{
			name:    "no user message",
			body:    map[string]any{"temperature": 0, "messages": []map[string]any{{"role": "assistant", "content": "hello"}}},
			content: "",
			params:  `{"messages":[{"role":"assistant","content":"hello"}],"temperature":0}`,
		},
	}
	for _, c := range cases {
		ch := ta.chatAsync(key, c.body)
		m := nextTask(t, n)
		if m.Payload["content"] != c.content {
			t.Errorf("%s: content %q, want %q", c.name, m.Payload["content"], c.content)
		}
		var got, want any
		raw, _ := json.Marshal(m.Payload["params"])
		_ = json.Unmarshal(raw, &got)
		if err := json.Unmarshal([]byte(c.params), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: params\n %s\nwant\n %s", c.name, raw, c.params)
		}
		if m.Payload["stream"] != false {
			t.Errorf("%s: stream %v", c.name, m.Payload["stream"])
		}
		n.Result(m.TaskID(), "completed", "ok")
		if r := waitFor(t, ch, 5*time.Second); r.code != 200 {
			t.Errorf("%s: HTTP %d %s", c.name, r.code, r.body)
		}
	}
}

func TestOpenAIPlainResponse(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "echo"))

	for _, c := range []struct {
		usage any
		want  map[string]int64
	}{
		{map[string]any{"prompt_tokens": 3, "completion_tokens": 5}, map[string]int64{"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}},
		{nil, map[string]int64{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}},
	} {
		before := time.Now().Unix()
		ch := ta.chatAsync(key, map[string]any{"model": "gemmanet/echo", "messages": userMsg("hi")})
		m := nextTask(t, n)
		n.MustSend("task_result", map[string]any{"task_id": m.TaskID(), "status": "completed",
			"result": "Hello <b>&</b> ünïcode", "processing_time_ms": 3, "usage": c.usage})
		r := waitFor(t, ch, 5*time.Second)
		var raw map[string]any
		r.decode(t, &raw)
		var out completion
		r.decode(t, &out)
		if r.code != 200 || out.ID != "chatcmpl-"+m.TaskID() || out.Object != "chat.completion" || out.Model != "gemmanet/echo" ||
			out.Created < before || out.Created > time.Now().Unix() || len(out.Choices) != 1 {
			t.Fatalf("HTTP %d %s", r.code, r.body)
		}
		ch0 := out.Choices[0]
		if ch0.Index != 0 || ch0.Message.Role != "assistant" || ch0.Message.Content != "Hello <b>&</b> ünïcode" || ch0.FinishReason != "stop" {
			t.Errorf("choice %+v", ch0)
		}
		if !reflect.DeepEqual(out.Usage, c.want) {
			t.Errorf("node usage %v: usage %v, want %v", c.usage, out.Usage, c.want)
		}
		if len(raw) != 6 {
			t.Errorf("fields %v, want id, object, created, model, choices, usage", raw)
		}
	}
}

// sseReply is a streamed answer: its status, content type and events.
type sseReply struct {
	code        int
	contentType string
	events      []string // the text after "data: " of each event
	err         error
}

// streamAsync posts a streaming chat completion from a goroutine and reads
// OpenAI's framing: "data: …" lines, each followed by a blank line.
func (ta *testApp) streamAsync(ctx context.Context, key string, body map[string]any) <-chan sseReply {
	body["stream"] = true
	j, _ := json.Marshal(body)
	return async(func() (out sseReply) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ta.url+"/v1/chat/completions", strings.NewReader(string(j)))
		if err != nil {
			return sseReply{err: err}
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return sseReply{err: err}
		}
		defer resp.Body.Close()
		out.code, out.contentType = resp.StatusCode, resp.Header.Get("Content-Type")
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if line != "" {
					out.err = fmt.Errorf("unterminated line %q", line)
				}
				return out
			}
			if !strings.HasPrefix(line, "data: ") {
				out.err = fmt.Errorf("line %q does not start with \"data: \"", line)
				return out
			}
			if blank, err := r.ReadString('\n'); err != nil || blank != "\n" {
				out.err = fmt.Errorf("event %q not followed by a blank line: %q, %v", line, blank, err)
				return out
			}
			out.events = append(out.events, strings.TrimSuffix(strings.TrimPrefix(line, "data: "), "\n"))
		}
	})
}

func (r sseReply) check(t *testing.T) []string {
	t.Helper()
	if r.err != nil || r.code != 200 || r.contentType != "text/event-stream" {
		t.Fatalf("HTTP %d %s, events %q: %v", r.code, r.contentType, r.events, r.err)
	}
	return r.events
}

type chunkEvent struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int               `json:"index"`
		Delta        map[string]string `json:"delta"`
		FinishReason *string           `json:"finish_reason"`
	} `json:"choices"`
}

// checkChunks checks the chunks of a stream that ended normally and
// returns their deltas in order.
func checkChunks(t *testing.T, events []string, taskID, model string) []map[string]string {
	t.Helper()
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q: want role, deltas, stop, [DONE]", events)
	}
	var deltas []map[string]string
	var created int64
	for i, ev := range events[:len(events)-1] {
		var c chunkEvent
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if created == 0 {
			created = c.Created
		}
		if c.ID != "chatcmpl-"+taskID || c.Object != "chat.completion.chunk" || c.Model != model || c.Created != created ||
			len(c.Choices) != 1 || c.Choices[0].Index != 0 {
			t.Fatalf("chunk %s", ev)
		}
		last := i == len(events)-2
		fr := c.Choices[0].FinishReason
		if last != (fr != nil) || (fr != nil && *fr != "stop") || !strings.Contains(ev, `"finish_reason":`) {
			t.Errorf("chunk %d of %d: %s: finish_reason must be null, and \"stop\" on the last", i+1, len(events)-1, ev)
		}
		deltas = append(deltas, c.Choices[0].Delta)
	}
	if !reflect.DeepEqual(deltas[0], map[string]string{"role": "assistant"}) || len(deltas[len(deltas)-1]) != 0 {
		t.Errorf("first delta %v, last %v: want the role, then {}", deltas[0], deltas[len(deltas)-1])
	}
	return deltas[1 : len(deltas)-1]
}

func TestOpenAIStream(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "echo", "chat"))
	ctx := e2eCtx(t)

	t.Run("chunks", func(t *testing.T) {
		ch := ta.streamAsync(ctx, key, map[string]any{"model": "gemmanet/echo", "messages": userMsg("hi")})
		m := nextTask(t, n)
		if m.Payload["stream"] != true {
			t.Errorf("stream %v", m.Payload["stream"])
		}
		n.Chunk(m.TaskID(), "Hel")
		n.Chunk(m.TaskID(), "")
		n.Chunk(m.TaskID(), "lo")
		n.Result(m.TaskID(), "completed", "Hello")
		events := waitFor(t, ch, 5*time.Second).check(t)
		deltas := checkChunks(t, events, m.TaskID(), "gemmanet/echo")
		want := []map[string]string{{"content": "Hel"}, {"content": ""}, {"content": "lo"}}
		if !reflect.DeepEqual(deltas, want) {
			t.Errorf("deltas %v, want %v", deltas, want)
		}
	})

	t.Run("whole result at once", func(t *testing.T) {
		ch := ta.streamAsync(ctx, key, map[string]any{"model": "gpt-4o", "messages": userMsg("hi")})
		m := nextTask(t, n)
		n.Result(m.TaskID(), "completed", "all of it")
		deltas := checkChunks(t, waitFor(t, ch, 5*time.Second).check(t), m.TaskID(), "gpt-4o")
		if want := []map[string]string{{"content": "all of it"}}; !reflect.DeepEqual(deltas, want) {
			t.Errorf("deltas %v, want %v", deltas, want)
		}
	})

	t.Run("node failure mid-stream", func(t *testing.T) {
		ch := ta.streamAsync(ctx, key, map[string]any{"model": "gemmanet/echo", "messages": userMsg("hi")})
		m := nextTask(t, n)
		n.Chunk(m.TaskID(), "par")
		n.Result(m.TaskID(), "failed", "model exploded")
		events := waitFor(t, ch, 5*time.Second).check(t)
		if len(events) != 4 || events[3] != "[DONE]" {
			t.Fatalf("events %q: want role, delta, error, [DONE]", events)
		}
		var e openAIError
		if err := json.Unmarshal([]byte(events[2]), &e); err != nil || e.Error.Type != "server_error" ||
			e.Error.Code != "task_failed" || e.Error.Message != "model exploded" {
			t.Errorf("error event %s (%v)", events[2], err)
		}
	})

	t.Run("node gone mid-stream", func(t *testing.T) {
		n2 := connectNode(t, ta.wsURL, reg(key, "n2", "gone"))
		ch := ta.streamAsync(ctx, key, map[string]any{"model": "gemmanet/gone", "messages": userMsg("hi")})
		m := nextTask(t, n2)
		n2.Chunk(m.TaskID(), "par")
		_ = n2.Conn.CloseNow()
		events := waitFor(t, ch, 5*time.Second).check(t)
		if len(events) != 4 || events[3] != "[DONE]" || !strings.Contains(events[2], `"code":"node_disconnected"`) {
			t.Fatalf("events %q: want role, delta, node_disconnected, [DONE]", events)
		}
	})
}

// A long conversation to a split capability runs in parts, as on
// /api/v1/request; a streaming client gets the joined answer as one chunk.
func TestOpenAISplit(t *testing.T) {
	ta := startApp(t, nil) // split types default to translate
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "translate"))
	var paras []string
	for i := 0; i < 3; i++ {
		paras = append(paras, fmt.Sprintf("paragraph %d %s", i, strings.Repeat("x", 400)))
	}
	msgs := []map[string]any{{"role": "system", "content": "to German"}, {"role": "user", "content": strings.Join(paras, "\n\n")}}
	// answer answers the three parts and returns the joined answer expected.
	answer := func(t *testing.T) string {
		got := map[string]string{}
		for len(got) < 3 {
			m := nextTask(t, n)
			got[m.TaskID()] = m.Payload["content"].(string)
			if pm, _ := m.Payload["params"].(map[string]any)["messages"].([]any); len(pm) != 2 {
				t.Errorf("part params %v", m.Payload["params"])
			}
			n.MustSend("task_result", map[string]any{"task_id": m.TaskID(), "status": "completed",
				"result": strings.ToUpper(m.Payload["content"].(string)), "usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 2}})
		}
		var ids []string
		for id := range got {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var out []string
		for _, id := range ids {
			out = append(out, strings.ToUpper(got[id]))
		}
		return strings.Join(out, "\n\n")
	}

	ch := ta.chatAsync(key, map[string]any{"model": "gemmanet/translate", "messages": msgs})
	want := answer(t)
	r := waitFor(t, ch, 5*time.Second)
	var out completion
	r.decode(t, &out)
	if r.code != 200 || len(out.Choices) != 1 || out.Choices[0].Message.Content != want || !strings.Contains(want, "PARAGRAPH 2") {
		t.Fatalf("HTTP %d %s; want the parts joined: %q", r.code, r.body, want)
	}
	if wantUsage := map[string]int64{"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}; !reflect.DeepEqual(out.Usage, wantUsage) {
		t.Errorf("usage %v, want the parts' summed: %v", out.Usage, wantUsage)
	}

	sc := ta.streamAsync(e2eCtx(t), key, map[string]any{"model": "gemmanet/translate", "messages": msgs})
	want = answer(t)
	events := waitFor(t, sc, 5*time.Second).check(t)
	if len(events) != 2 || events[1] != "[DONE]" {
		t.Fatalf("events %q: want one chunk, then [DONE]", events)
	}
	var c chunkEvent
	if err := json.Unmarshal([]byte(events[0]), &c); err != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason == nil ||
		*c.Choices[0].FinishReason != "stop" || !reflect.DeepEqual(c.Choices[0].Delta, map[string]string{"role": "assistant", "content": want}) {
		t.Errorf("chunk %s (%v)", events[0], err)
	}
}

func TestOpenAIErrors(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.TaskTimeout = 300 * time.Millisecond })
	key := ta.account(t, "alice", "")
	post := func(key string, body any) (int, []byte, http.Header) {
		code, b, h, err := ta.do(http.MethodPost, "/v1/chat/completions", key, body)
		if err != nil {
			t.Fatal(err)
		}
		return code, b, h
	}

	t.Run("bad key", func(t *testing.T) {
		for _, k := range []string{"gn_00000000000000000000000000000000", ""} {
			code, b, _ := post(k, map[string]any{"messages": userMsg("hi")})
			checkOpenAIError(t, "key "+k, code, b, 401, "authentication_error", "invalid_api_key")
		}
	})

	t.Run("no node", func(t *testing.T) {
		for _, stream := range []bool{false, true} {
			code, b, h := post(key, map[string]any{"model": "gemmanet/nobody", "messages": userMsg("hi"), "stream": stream})
			checkOpenAIError(t, "no node", code, b, 503, "server_error", "no_node_available")
			if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("stream %v: Content-Type %q", stream, ct)
			}
		}
	})

	t.Run("node failure", func(t *testing.T) {
		n := connectNode(t, ta.wsURL, reg(key, "fails", "fail"))
		ch := ta.chatAsync(key, map[string]any{"model": "gemmanet/fail", "messages": userMsg("hi")})
		n.Result(nextTask(t, n).TaskID(), "failed", "model exploded")
		r := waitFor(t, ch, 5*time.Second)
		e := checkOpenAIError(t, "node failure", r.code, r.body, 502, "server_error", "node_error")
		if e.Error.Message != "model exploded" || r.header.Get("X-Should-Retry") != "false" {
			t.Errorf("message %q, X-Should-Retry %q", e.Error.Message, r.header.Get("X-Should-Retry"))
		}
	})

	t.Run("timeout", func(t *testing.T) {
		n := connectNode(t, ta.wsURL, reg(key, "silent", "silent"))
		ch := ta.chatAsync(key, map[string]any{"model": "gemmanet/silent", "messages": userMsg("hi")})
		nextTask(t, n)
		r := waitFor(t, ch, 5*time.Second)
		checkOpenAIError(t, "timeout", r.code, r.body, 504, "server_error", "timeout")
	})

	t.Run("node gone", func(t *testing.T) {
		n := connectNode(t, ta.wsURL, reg(key, "leaves", "leave"))
		ch := ta.chatAsync(key, map[string]any{"model": "gemmanet/leave", "messages": userMsg("hi")})
		nextTask(t, n)
		_ = n.Conn.CloseNow()
		r := waitFor(t, ch, 5*time.Second)
		checkOpenAIError(t, "node gone", r.code, r.body, 502, "server_error", "node_disconnected")
	})

	t.Run("bad bodies", func(t *testing.T) {
		many := make([]map[string]any, 501)
		for i := range many {
			many[i] = map[string]any{"role": "user", "content": "x"}
		}
		half := strings.Repeat("é", 100_000)
		for _, c := range []struct {
			body   any
			status int
			code   string
			msg    string
		}{
			{`not json`, 422, "invalid_request", "must be a JSON object"},
			{map[string]any{"model": "gpt-4"}, 422, "invalid_request", "messages is required"},
			{map[string]any{"messages": []any{}}, 422, "invalid_request", "messages must have 1-500 items"},
			{map[string]any{"messages": many}, 422, "invalid_request", "messages must have 1-500 items"},
			{map[string]any{"messages": "hi"}, 422, "invalid_request", "messages has the wrong type"},
			{map[string]any{"messages": []map[string]any{{"content": "x"}}}, 422, "invalid_request", "messages[0].role is required"},
			{map[string]any{"messages": []map[string]any{{"role": "user", "content": 5}}}, 422, "invalid_request", "messages[0].content must be a string"},
			{map[string]any{"messages": []map[string]any{{"role": "user", "content": map[string]any{"text": "x"}}}}, 422, "invalid_request", "messages[0].content must be a string"},
			{map[string]any{"messages": userMsg("x"), "max_tokens": 1.5}, 422, "invalid_request", "max_tokens must be an integer"},
			{map[string]any{"messages": userMsg("x"), "temperature": "hot"}, 422, "invalid_request", "temperature must be a number"},
			{map[string]any{"messages": userMsg("x"), "stream": "yes"}, 422, "invalid_request", "stream has the wrong type"},
			// What reaches the store and the records is checked as on /api/v1/request.
			{map[string]any{"messages": userMsg("x"), "model": "gemmanet/" + randomLetters(9000)}, 422, "invalid_request", "model must be at most 256 characters"},
			{map[string]any{"messages": userMsg("x"), "model": "gemmanet/" + strings.Repeat("a", 65)}, 422, "invalid_request", "must be 1-64 characters"},
			{map[string]any{"messages": userMsg("x"), "model": "gemmanet/a\x00b"}, 422, "invalid_request", "control characters"},
			{map[string]any{"messages": userMsg("x"), "model": strings.Repeat("m", 257)}, 422, "invalid_request", "model must be at most 256 characters"},
			{map[string]any{"messages": userMsg("x"), "max_tokens": -5}, 422, "invalid_request", "max_tokens must be an integer of at least 1"},
			{map[string]any{"messages": userMsg("x"), "max_tokens": 0}, 422, "invalid_request", "max_tokens must be an integer of at least 1"},
			{map[string]any{"messages": userMsg("x"), "temperature": 2.5}, 422, "invalid_request", "temperature must be a number from 0 to 2"},
			{map[string]any{"messages": userMsg("x"), "temperature": -0.1}, 422, "invalid_request", "temperature must be a number from 0 to 2"},
			{map[string]any{"messages": userMsg("x"), "user": strings.Repeat("u", 257)}, 422, "invalid_request", "user must be at most 256 characters"},
			{map[string]any{"messages": userMsg("x"), "prompt_cache_key": "a\nb"}, 422, "invalid_request", "prompt_cache_key must be at most 256 characters, without control"},
			{map[string]any{"messages": []map[string]any{{"role": "system", "content": half}, {"role": "user", "content": half + "!"}}}, 400, "context_length_exceeded", "200000"},
		} {
			code, b, _ := post(key, c.body)
			e := checkOpenAIError(t, "body", code, b, c.status, "invalid_request_error", c.code)
			if !strings.Contains(e.Error.Message, c.msg) {
				t.Errorf("body %.80v: message %q, want %q", c.body, e.Error.Message, c.msg)
			}
		}
		// Exactly at the limit passes validation (and finds no node).
		code, b, _ := post(key, map[string]any{"messages": []map[string]any{{"role": "system", "content": half}, {"role": "user", "content": half}}})
		checkOpenAIError(t, "at the limit", code, b, 503, "server_error", "no_node_available")
	})
}

func TestOpenAIRateLimits(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.RequestRate, c.PublicRate = 1, 1 })
	key := ta.account(t, "alice", "")
	body := map[string]any{"messages": userMsg("hi")}
	if code, b, _, _ := ta.do(http.MethodPost, "/v1/chat/completions", key, body); code != 503 {
		t.Fatalf("first request: HTTP %d %s", code, b)
	}
	code, b, h, _ := ta.do(http.MethodPost, "/v1/chat/completions", key, body)
	checkOpenAIError(t, "second request", code, b, 429, "rate_limit_error", "rate_limit_exceeded")
	if h.Get("Retry-After") == "" || h.Get("X-RateLimit-Limit") != "1" {
		t.Errorf("headers %v", h)
	}
	// The same budget as /api/v1/request.
	var e apiErr
	if code, _ := ta.call(t, http.MethodPost, "/api/v1/request", key, map[string]any{"task_type": "chat", "content": "x"}, &e); code != 429 {
		t.Errorf("/api/v1/request after the OpenAI budget is spent: HTTP %d", code)
	}
	if code, _, _, _ := ta.do(http.MethodGet, "/v1/models", "", nil); code != 200 {
		t.Fatalf("models: HTTP %d", code)
	}
	code, b, h, _ = ta.do(http.MethodGet, "/v1/models", "", nil)
	checkOpenAIError(t, "models again", code, b, 429, "rate_limit_error", "rate_limit_exceeded")
	if h.Get("Retry-After") == "" {
		t.Errorf("headers %v", h)
	}
}

// X-GemmaNet-Trust: official keeps a request off community nodes.
func TestOpenAITrustHeader(t *testing.T) {
	ta := startApp(t, nil)
	community := ta.account(t, "alice", "")
	official := ta.account(t, "bob", "official")
	n := connectNode(t, ta.wsURL, reg(community, "c1", "chat"))
	// The requester's own tier does not matter; the header does.
	send := func() chatReply {
		j, _ := json.Marshal(map[string]any{"messages": userMsg("hi")})
		req, _ := http.NewRequest(http.MethodPost, ta.url+"/v1/chat/completions", strings.NewReader(string(j)))
		req.Header.Set("Authorization", "Bearer "+community)
		req.Header.Set("X-GemmaNet-Trust", "Official")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return chatReply{reply: reply{err: err}}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return chatReply{reply{resp.StatusCode, b, err}, resp.Header}
	}
	r := send()
	checkOpenAIError(t, "official demanded, community node only", r.code, r.body, 503, "server_error", "no_node_available")
	for len(n.Msgs) > 0 {
		if m := <-n.Msgs; m.MsgType == "task_assign" {
			t.Fatalf("the community node got a task: %v", m.Payload)
		}
	}
	o := connectNode(t, ta.wsURL, reg(official, "o1", "chat"))
	ch := async(send)
	m := nextTask(t, o)
	o.Result(m.TaskID(), "completed", "official answer")
	if r := waitFor(t, ch, 5*time.Second); r.code != 200 || !strings.Contains(string(r.body), "official answer") {
		t.Errorf("HTTP %d %s", r.code, r.body)
	}
}

func TestOpenAIModels(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	connectNode(t, ta.wsURL, reg(key, "n1", "zeta", "translate", "auto"))
	connectNode(t, ta.wsURL, reg(key, "n2", "echo", "translate"))
	var out struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}
	if code, _ := ta.call(t, http.MethodGet, "/v1/models", "", nil, &out); code != 200 || out.Object != "list" {
		t.Fatalf("HTTP %d %+v", code, out)
	}
	var ids []string
	for _, m := range out.Data {
		ids = append(ids, m["id"].(string))
		if m["object"] != "model" || m["owned_by"] != "gemmanet" || m["created"] != 0.0 || len(m) != 4 {
			t.Errorf("model %v", m)
		}
	}
	want := []string{"gemmanet/auto", "gemmanet/echo", "gemmanet/translate", "gemmanet/zeta", "gemmanet/chat", "gemmanet/summarize", "gemmanet/code"}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("models %v, want %v", ids, want)
	}
}

// The official openai npm package, run by Node.js, against a real instance
// and an SDK node: what an application written for OpenAI sees.
func TestOpenAIClientLibrary(t *testing.T) {
	nodeBin, nodeErr := exec.LookPath("node")
	npmBin, npmErr := exec.LookPath("npm")
	if nodeErr != nil || npmErr != nil {
		t.Skip("Node.js and npm are needed to run the openai npm package; install them to run this test")
	}
	dir := filepath.Join("testdata", "openai")
	npmCI(t, npmBin, dir, "openai")

	// An alias whose first target no node serves falls back to echo.
	ta := startApp(t, func(c *Config) { c.ModelAliases = map[string][]string{"house-model": {"nowhere", "echo"}} })
	key := ta.account(t, "alice", "")
	var failures atomic.Int32
	node := runSDKNode(t, ta, sdk.NodeConfig{
		APIKey: key, Name: "echoer", Capabilities: []string{"echo", "fail", "embed", "params"}, MaxConcurrency: 4,
		Handler: sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
			if task.Type == "params" { // what reached the node, for the client to compare
				b, err := json.Marshal(task.Params)
				return sdk.Result{Text: string(b)}, err
			}
			if task.Type == "fail" {
				failures.Add(1)
				return sdk.Result{}, errors.New("deliberate failure")
			}
			if task.Type == "embed" {
				in, _ := task.Params["input"].([]any)
				vecs, chars := make([][]float64, len(in)), 0
				for i, s := range in {
					n := utf8.RuneCountInString(s.(string))
					vecs[i], chars = []float64{float64(n), 0.5}, chars+n
				}
				b, err := json.Marshal(vecs)
				return sdk.Result{Text: string(b), Usage: &sdk.Usage{PromptTokens: chars}}, err
			}
			msgs, _ := task.Params["messages"].([]any)
			text := []rune(task.Content)
			if task.Stream {
				// In three pieces, so the client sees more than one delta.
				for _, cut := range [][2]int{{0, len(text) / 3}, {len(text) / 3, 2 * len(text) / 3}, {2 * len(text) / 3, len(text)}} {
					if err := emit(string(text[cut[0]:cut[1]])); err != nil {
						return sdk.Result{}, err
					}
				}
			}
			return sdk.Result{Text: task.Content, Usage: &sdk.Usage{
				PromptTokens: len(msgs), CompletionTokens: utf8.RuneCountInString(task.Content),
			}}, nil
		}),
	})
	node.WaitRegistered(t, 5*time.Second)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "chat.mjs", ta.url+"/v1", key)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node chat.mjs: %v\n%s", err, out)
	}
	t.Logf("node chat.mjs:\n%s", out)
	// One plain and one streamed request to the failing capability; the
	// library must not have retried the plain one (X-Should-Retry: false).
	if n := failures.Load(); n != 2 {
		t.Errorf("the failing handler ran %d times, want 2", n)
	}
}

// Errors raised before the route runs (the body limit) are OpenAI-shaped
// on /v1/ too: the shape is chosen by path, in one place.
func TestOpenAIBodyLimitShape(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	big := `{"model":"gemmanet/echo","messages":[{"role":"user","content":"` + strings.Repeat("x", 2_000_001) + `"}]}`
	var e openAIError
	code, _ := ta.call(t, "POST", "/v1/chat/completions", key, big, &e)
	if code != 413 || e.Error.Type != "invalid_request_error" || e.Error.Code != "payload_too_large" || e.Detail != nil {
		t.Fatalf("413 on /v1: %d %+v", code, e)
	}
}

// FuzzParseChatBody: whatever a client sends to /v1/chat/completions is
// refused with an invalid-request error or the context-length error, or
// accepted within the bounds the node side relies on.
func FuzzParseChatBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"gemmanet/chat","messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}],"stream":true}`,
		`{"messages":[{"role":"system","content":null}],"max_tokens":16,"temperature":0.7}`,
		`{"messages":[]}`, `{"messages":[{"content":"x"}]}`, `{"messages":[{"role":"u","content":1}]}`,
		`{"messages":[{"role":"u","content":"x"}],"max_tokens":1.5}`, `{"messages":[{"role":"u","content":"x"}],"temperature":1e999}`,
		`[]`, `{`, `null`, `{"model":1}`,
		`{"messages":[{"role":"user","content":"<&>"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"seed":9007199254740992}`,
		`{"messages":[{"role":"u","content":"x"}],"seed":9007199254740993}`, `{"messages":[{"role":"u","content":"x"}],"top-p":1}`,
		`{"messages":[{"role":"u","content":"x"}],"content":1}`, `{"messages":[{"role":"u","content":"\u2028"}],"stream":false,"stream":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := parseChatBody(data)
		if err != nil {
			if !errors.Is(err, errInvalidBody) && !errors.Is(err, errContextLength) {
				t.Fatalf("error of the wrong kind: %v", err)
			}
			return
		}
		if n := len(b.Messages); n < 1 || n > maxChatMessages {
			t.Fatalf("%d messages accepted", n)
		}
		total := 0
		for _, m := range b.Messages {
			total += utf8.RuneCountInString(m.Content)
		}
		if total > maxContentChars {
			t.Fatalf("%d characters of content accepted", total)
		}
		if b.Temperature != nil && (math.IsNaN(*b.Temperature) || math.IsInf(*b.Temperature, 0)) {
			t.Fatalf("temperature %v accepted", *b.Temperature)
		}
		// The params are what a node reads: UTF-8, one JSON object within
		// the bounds, with the body's fields but model and stream, each
		// the same value as in the body.
		if len(b.Params) > maxChatParamBytes || !utf8.Valid(b.Params) {
			t.Fatalf("params of %d bytes, or not UTF-8, accepted", len(b.Params))
		}
		var params, body map[string]any
		if err := json.Unmarshal(b.Params, &params); err != nil {
			t.Fatalf("accepted a body whose params a node cannot read: %v\n%s", err, b.Params)
		}
		if err := json.Unmarshal(data, &body); err != nil {
			t.Fatalf("accepted a body encoding/json refuses: %v", err)
		}
		delete(body, "model")
		delete(body, "stream")
		if !reflect.DeepEqual(params, body) {
			t.Fatalf("params\n %s\nare not the body but model and stream\n %s", b.Params, data)
		}
		if r := (paramsReader{b: b.Params, lim: chatParamLimits}); r.params(nil) != nil {
			t.Fatalf("params break their own rules: %v", r.params(nil))
		}
	})
}

// randomLetters is n random lowercase letters: a name no index compresses
// (a long run of one letter would fit where random ones do not).
func randomLetters(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(rand.IntN(26))
	}
	return string(b)
}
