package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	segjson "github.com/segmentio/encoding/json"

	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"
)

// The OpenAI-compatible routes, POST /v1/chat/completions and GET /v1/models
// (docs/PROTOCOL.md). They run tasks exactly as /api/v1/request does; what
// differs is the shape of bodies, streams and errors, which follow OpenAI's
// so that its client libraries work with only a new base URL and key.

// GemmaNet's limit and names for the OpenAI routes.
const (
	maxChatMessages = 500
	defaultChatCap  = "chat"
	defaultModel    = "gemmanet/auto" // the model of a body that names none
	modelPrefix     = "gemmanet/"
)

// staticModels are listed by GET /v1/models whether or not a node serves them.
var staticModels = []string{"chat", "translate", "summarize", "code"}

// maxModelChars bounds a model's name: it is echoed in every answer and
// chunk, and names a task type (checkModel).
const maxModelChars = 256

// checkModel applies the rules of a model's name on the OpenAI routes: at
// most maxModelChars characters without control characters, and the task
// type a "gemmanet/<type>" name routes to is a task type as
// /api/v1/request takes it (checkTaskType). Other names route to the
// route's default type, or through --model-aliases to the operator's.
func checkModel(model string) error {
	if utf8.RuneCountInString(model) > maxModelChars || strings.IndexFunc(model, unicode.IsControl) >= 0 {
		return invalid("model must be at most %d characters, without control characters", maxModelChars)
	}
	m := strings.TrimSpace(model)
	if len(m) >= len(modelPrefix) && strings.EqualFold(m[:len(modelPrefix)], modelPrefix) {
		if c := m[len(modelPrefix):]; c != "" {
			return checkTaskType("the task type a model "+modelPrefix+"<type> names", c)
		}
	}
	return nil
}

// modelCapability is the capability a model name routes to: the rest of
// "gemmanet/<capability>" (any case for the prefix), and chat for
// "gemmanet/", "gemmanet/auto" and every other name.
func modelCapability(model string) string {
	m := strings.TrimSpace(model)
	if len(m) < len(modelPrefix) || !strings.EqualFold(m[:len(modelPrefix)], modelPrefix) {
		return defaultChatCap
	}
	c := m[len(modelPrefix):]
	if c == "" || strings.EqualFold(c, "auto") {
		return defaultChatCap
	}
	return c
}

// chatMessage is a message of an answer, and one of a body as far as the
// server reads it (its role and its content's text, for the content a
// node receives).
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatBody is a validated POST /v1/chat/completions body.
type chatBody struct {
	Model       string // as sent, for the answer's "model"
	Messages    []chatMessage
	MaxTokens   *int64
	Temperature *float64
	Stream      bool
	// IncludeUsage is stream_options.include_usage: a streaming answer ends
	// with a chunk that carries the usage and no choices.
	IncludeUsage bool
	// Session is prompt_cache_key, else user: what names a conversation
	// for session affinity when X-Session-Id does not.
	Session string
	// Params is what the node receives as params: every member of the
	// body but model and stream, as sent (chatParamsOf).
	Params json.RawMessage
}

// The bounds of a chat completion's params, which are its body but for
// model and stream (docs/PROTOCOL.md). The body is already within
// --max-body-bytes and wire.CheckBounds; these keep what a node is sent
// readable by a Go, JavaScript or Python node: keys that are keyword
// arguments, numbers a float64 holds, and a task_assign within what the Go
// SDK reads (wire.MaxAssignBytes): 4 MiB of params, with at most 1.2 MB of
// content (200,000 characters, 6 bytes each at worst) and the envelope.
// Strings have no limit of their own: an image's data URL is long.
const (
	maxChatParamKeys  = 64      // OpenAI documents some 35 fields
	maxChatParamDepth = 32      // the body being 1: room for a tool's or response_format's JSON schema
	maxChatParamBytes = 4 << 20 // as JSON a node is sent (compact, <, > and & escaped)
)

// chatParamLimits are the rules of a chat body's fields, read as params.
var chatParamLimits = paramLimits{keys: maxChatParamKeys, depth: maxChatParamDepth,
	object: "the body", key: "the body's field"}

// chatConsumed are the body's fields the server uses and does not pass on:
// the model chose the task type, and stream is the task_assign's own.
var chatConsumed = []string{"model", "stream"}

// chatParamsOf is the params a chat body b (a JSON object that decoded)
// gives its node: each of its members but chatConsumed, as sent (compact,
// and escaped as the node's task_assign is, so that its size is what the
// node reads), after applying chatParamLimits to every field. Read in
// place (paramsReader), with no value decoded: the output is at most b's
// size until it is known to be within maxChatParamBytes.
func chatParamsOf(b []byte) (json.RawMessage, error) {
	// Passed to the node byte for byte, in a WebSocket text frame: invalid
	// UTF-8 there makes a strict node client drop the whole connection.
	if !utf8.Valid(b) {
		return nil, invalid("the body must be valid UTF-8")
	}
	if !json.Valid(b) {
		return nil, invalid("the body is not valid JSON")
	}
	var out bytes.Buffer
	out.Grow(len(b))
	out.WriteByte('{')
	var compactErr error
	r := paramsReader{b: b, lim: chatParamLimits}
	err := r.params(func(k string, v []byte) {
		if slices.Contains(chatConsumed, k) || compactErr != nil {
			return
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		// k is an identifier (paramsReader): nothing in it to escape, and
		// spelled plainly, as tasks.MaxTokens looks for max_tokens.
		out.WriteString(`"` + k + `":`)
		compactErr = json.Compact(&out, v)
	})
	if err != nil {
		return nil, err
	}
	if compactErr != nil {
		return nil, invalid("the body is not valid JSON")
	}
	out.WriteByte('}')
	n := out.Len() + htmlEscapeGrowth(out.Bytes())
	if n > maxChatParamBytes {
		return nil, invalid("the body, but model and stream, must be at most %d bytes as JSON (<, > and & count 6 bytes each); it is %d", maxChatParamBytes, n)
	}
	if n == out.Len() {
		return out.Bytes(), nil
	}
	var esc bytes.Buffer
	esc.Grow(n)
	json.HTMLEscape(&esc, out.Bytes())
	return esc.Bytes(), nil
}

// htmlEscapeGrowth is how many bytes json.HTMLEscape adds to b: <, > and &
// become \u003c (6 bytes for 1), U+2028 and U+2029 \u2028 (6 for 3). A node's
// task_assign is written so (segmentio/encoding/json escapes a
// json.RawMessage as encoding/json does).
func htmlEscapeGrowth(b []byte) int {
	n := 0
	for i, c := range b {
		switch {
		case c == '<' || c == '>' || c == '&':
			n += 5
		case c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8:
			n += 3
		}
	}
	return n
}

// errContextLength is a body whose messages are too long in all (400, not 422).
var errContextLength = errors.New("context length exceeded")

// parseChatBody decodes and checks a body. The fields it does not read
// (tools, n, top_p, response_format…) it checks only as params
// (chatParamsOf): they reach the node as sent.
func parseChatBody(b []byte) (chatBody, error) {
	var raw struct {
		Model         *string         `json:"model"`
		Messages      json.RawMessage `json:"messages"`
		MaxTokens     json.RawMessage `json:"max_tokens"`
		Temperature   json.RawMessage `json:"temperature"`
		Stream        *bool           `json:"stream"`
		StreamOptions json.RawMessage `json:"stream_options"`
		User          json.RawMessage `json:"user"`
		CacheKey      json.RawMessage `json:"prompt_cache_key"`
	}
	var body chatBody
	if err := decodeObject(b, &raw); err != nil {
		return body, err
	}
	body.Model = defaultModel
	if raw.Model != nil {
		body.Model = *raw.Model
	}
	if err := checkModel(body.Model); err != nil {
		return body, err
	}
	if len(raw.Messages) == 0 || string(raw.Messages) == "null" {
		return body, invalid("messages is required")
	}
	if raw.Messages[0] != '[' {
		return body, invalid("messages has the wrong type (%s)", jsonKind(raw.Messages))
	}
	// Counted before decoding: a message costs 32 bytes and more, a
	// hostile one 3 ("{},").
	if n := wire.CountItems(raw.Messages, maxChatMessages); n < 1 || n > maxChatMessages {
		return body, invalid("messages must have 1-%d items", maxChatMessages)
	}
	var msgs []struct {
		Role    *string         `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := unmarshal(raw.Messages, &msgs); err != nil {
		return body, invalid("messages must be a list of objects with a string role")
	}
	total := 0
	body.Messages = make([]chatMessage, 0, len(msgs))
	for i, m := range msgs {
		if m.Role == nil {
			return body, invalid("messages[%d].role is required", i)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return body, invalid("messages[%d].content %s", i, err)
		}
		total += utf8.RuneCountInString(text)
		body.Messages = append(body.Messages, chatMessage{Role: *m.Role, Content: text})
	}
	if total > maxContentChars {
		return body, errContextLength
	}
	var err error
	if body.MaxTokens, body.Temperature, err = sampling(raw.MaxTokens, raw.Temperature); err != nil {
		return body, err
	}
	if raw.Stream != nil {
		body.Stream = *raw.Stream
	}
	if body.IncludeUsage, err = includeUsage(raw.StreamOptions); err != nil {
		return body, err
	}
	if body.Session, err = sessionField(sessionFields{"prompt_cache_key", raw.CacheKey}, sessionFields{"user", raw.User}); err != nil {
		return body, err
	}
	if body.Params, err = chatParamsOf(bytes.TrimSpace(b)); err != nil {
		return body, err
	}
	return body, nil
}

// maxBodySessionChars bounds prompt_cache_key and user, which name a
// session for affinity when X-Session-Id does not: they are hashed on
// every request that names one.
const maxBodySessionChars = 256

type sessionFields struct {
	name string
	raw  json.RawMessage
}

// sessionField is the first of the fields that is a non-empty string (any
// other value is ignored, as OpenAI's unknown fields are). One over
// maxBodySessionChars, or holding a control character, is refused.
func sessionField(fields ...sessionFields) (string, error) {
	for _, f := range fields {
		var s string
		if len(f.raw) > 0 && json.Unmarshal(f.raw, &s) == nil && s != "" {
			if utf8.RuneCountInString(s) > maxBodySessionChars || strings.IndexFunc(s, unicode.IsControl) >= 0 {
				return "", invalid("%s must be at most %d characters, without control characters", f.name, maxBodySessionChars)
			}
			return s, nil
		}
	}
	return "", nil
}

// sampling reads max_tokens and temperature, each optional.
func sampling(maxTokens, temperature json.RawMessage) (*int64, *float64, error) {
	var mt *int64
	var temp *float64
	if n, ok := number(maxTokens); ok {
		i, err := integer(n)
		if err != nil || i < 1 {
			return nil, nil, invalid("max_tokens must be an integer of at least 1")
		}
		mt = &i
	} else if n != "" {
		return nil, nil, invalid("max_tokens must be an integer")
	}
	if n, ok := number(temperature); ok {
		f, err := n.Float64()
		if err != nil || f < 0 || f > 2 {
			return nil, nil, invalid("temperature must be a number from 0 to 2")
		}
		temp = &f
	} else if n != "" {
		return nil, nil, invalid("temperature must be a number")
	}
	return mt, temp, nil
}

// includeUsage reads stream_options: absent, null or an object whose
// include_usage, if there, is a boolean. Other options are ignored.
func includeUsage(raw json.RawMessage) (bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var opts struct {
		IncludeUsage *bool `json:"include_usage"`
	}
	if raw[0] != '{' || json.Unmarshal(raw, &opts) != nil {
		return false, invalid("stream_options must be an object whose include_usage is a boolean")
	}
	return opts.IncludeUsage != nil && *opts.IncludeUsage, nil
}

// contentText is a message's content as text: a string as it is, a list of
// parts as the text of its "text" parts joined, null or absent as "".
func contentText(c json.RawMessage) (string, error) {
	if len(c) == 0 || string(c) == "null" {
		return "", nil
	}
	switch c[0] {
	case '"':
		var s string
		if err := unmarshal(c, &s); err != nil {
			return "", errors.New("is not a valid string")
		}
		return s, nil
	case '[':
		// Part by part, none kept: a hostile list of "{}," would cost
		// a map of some 50 bytes for each 3 of the body.
		var sb strings.Builder
		var part struct { // one for all the parts: it escapes to the heap
			Type *string `json:"type"`
			Text *string `json:"text"`
		}
		err := wire.EachItem(c, func(item []byte) error {
			part.Type, part.Text = nil, nil
			// A part that is not an object, or whose type or text is not
			// a string, is not a text part: skipped, as before.
			if item[0] == '{' && segjson.Unmarshal(item, &part) == nil && part.Type != nil && *part.Type == "text" && part.Text != nil {
				sb.WriteString(*part.Text)
			}
			return nil
		})
		if err != nil {
			return "", errors.New("is not a valid list")
		}
		return sb.String(), nil
	}
	return "", errors.New("must be a string, a list of parts or null")
}

// number reads an optional JSON number: ok when it is one, "" when it is
// absent or null, anything else as it was sent.
func number(raw json.RawMessage) (json.Number, bool) {
	s := string(raw)
	if s == "" || s == "null" {
		return "", false
	}
	if s[0] == '-' || (s[0] >= '0' && s[0] <= '9') {
		return json.Number(s), true
	}
	return json.Number(s), false
}

// integer reads a JSON number that is a whole number (100 or 100.0).
func integer(n json.Number) (int64, error) {
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, errors.New("not an integer")
	}
	return int64(f), nil
}

// flatten is the content a node receives, for handlers that read only
// content: the last user message, after the last system message if any.
func flatten(msgs []chatMessage) string {
	var system, user string
	hasSystem := false
	for _, m := range msgs {
		switch m.Role {
		case "system":
			system, hasSystem = m.Content, true
		case "user":
			user = m.Content
		}
	}
	if hasSystem {
		return "System: " + system + "\n\nUser: " + user
	}
	return user
}

// chatCompletions is POST /v1/chat/completions, plain or streaming.
func (a *App) chatCompletions(c echo.Context) error {
	body, err := readOpenAIBody(a, c, parseChatBody, "the messages are longer than "+strconv.Itoa(maxContentChars)+" characters in all")
	if err != nil {
		return err
	}
	return a.withFallback(c, body.Model, defaultChatCap, func(taskType string) error {
		return a.chatTask(c, openAIRequest(c, taskType, flatten(body.Messages), body.Params, body.Stream, body.Session), body)
	})
}

// readOpenAIBody reads and checks the body of an OpenAI route that runs a
// task: 503 while draining, 422 for an X-Session-Id checkSessionID refuses,
// 400 context_length_exceeded (saying tooLong) and 422 invalid_request as
// parse finds them.
func readOpenAIBody[T any](a *App, c echo.Context, parse func([]byte) (T, error), tooLong string) (T, error) {
	var zero T
	if a.draining.Load() {
		return zero, &apiError{Status: http.StatusServiceUnavailable, Code: CodeNotReady, Message: "this instance is draining; retry on another", RetryAfter: "1"}
	}
	if err := checkSessionID(c); err != nil {
		return zero, err
	}
	b, err := readBody(c)
	if err != nil {
		return zero, err
	}
	if _, err := retriesOf(c, -1); err != nil {
		return zero, err
	}
	if _, err := nodeLabels(c, nil); err != nil {
		return zero, err
	}
	body, err := parse(b)
	switch {
	case errors.Is(err, errContextLength):
		return zero, newError(http.StatusBadRequest, CodeContextLengthExceeded, tooLong)
	case err != nil:
		return zero, newError(http.StatusUnprocessableEntity, CodeInvalidRequest, trimKind(err))
	}
	return body, nil
}

// openAIRequest is the task of an OpenAI route's request, of taskType (one
// of its model's targets); session is what the body names for affinity.
// Its labels are the X-Node-Labels header's, checked by readOpenAIBody.
func openAIRequest(c echo.Context, taskType, content string, params json.RawMessage, stream bool, session string) tasks.Request {
	acct := accountOf(c)
	labels, _ := nodeLabels(c, nil)
	retries, _ := retriesOf(c, -1)
	return tasks.Request{
		TaskID: uuid.NewString(), AccountID: acct.ID, KeyID: acct.KeyID, Session: sessionOf(c, session), TaskType: taskType,
		Content: content, Params: params, Stream: stream, Trust: trustOf(c), Labels: labels, Priority: nodes.DefaultPriority,
		Retries: retries,
	}
}

// chatTask runs a chat completion's task and answers it.
func (a *App) chatTask(c echo.Context, req tasks.Request, body chatBody) error {
	split := a.shouldSplit(req.TaskType, req.Content)
	if body.Stream && !split {
		sse := newSSE(c.Response())
		return a.streamTask(c, req, sse, &chatStream{sse: sse, id: "chatcmpl-" + req.TaskID, created: time.Now().Unix(), model: body.Model,
			includeUsage: body.IncludeUsage})
	}
	// A split task, as GemmaNet does, answers once every part is back, so a
	// failure is a plain HTTP error even when the client asked for a stream,
	// and a streaming client gets the whole answer as one chunk that also
	// says "stop".
	out, err := a.runTask(c, req, tasks.Hooks{})
	if err != nil {
		return openAITaskError(err)
	}
	if out.Status != tasks.StatusCompleted {
		return nodeFailure(out)
	}
	if !body.Stream {
		setServerTiming(c, out)
		return c.JSON(http.StatusOK, newCompletion(req.TaskID, body.Model, out))
	}
	sse := newSSE(c.Response())
	s := &chatStream{sse: sse, id: "chatcmpl-" + req.TaskID, created: time.Now().Unix(), model: body.Model, includeUsage: body.IncludeUsage}
	stop := "stop"
	if s.chunk(chunkDelta{Role: "assistant", Content: &out.Result}, &stop) == nil {
		s.end(out)
	}
	return nil
}

// modelTargets is the task types a model routes to, in order: an alias's
// (--model-aliases), else the one its name gives on a route whose default
// is def.
func (a *App) modelTargets(model, def string) []string {
	if ts, ok := a.cfg.ModelAliases[strings.TrimSpace(model)]; ok {
		return ts
	}
	return []string{capabilityOr(model, def)}
}

// withFallback runs attempt for each of a model's task types in turn while
// the answer is that no node serves it: an alias falls back to its next
// target only before anything was sent (a stream's first byte), so a
// client never sees two answers. Each attempt is a task of its own (its
// id, its record). A task type the key may not ask for is passed over; if
// none is left, the answer is 403 key_scope.
func (a *App) withFallback(c echo.Context, model, def string, attempt func(taskType string) error) error {
	l := accountOf(c).KeyLimits
	var err error
	tried := false
	for _, tt := range a.modelTargets(model, def) {
		if !l.AllowsType(tt) { // the key may not ask for it: as if none served it
			continue
		}
		tried = true
		err = attempt(tt)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Code != Code(tasks.CodeNoNode) {
			return err
		}
	}
	if !tried {
		return typeOutOfScope(l)
	}
	return err
}

// newCompletion is the chat.completion answer to a task that completed.
func newCompletion(taskID, model string, out tasks.Outcome) completionJSON {
	return completionJSON{
		ID: "chatcmpl-" + taskID, Object: "chat.completion", Created: time.Now().Unix(), Model: model,
		Choices: []completionChoice{{Message: chatMessage{Role: "assistant", Content: out.Result}, FinishReason: "stop"}},
		Usage:   openAIUsage(out.Usage),
	}
}

type completionJSON struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   usageJSON          `json:"usage"`
}

type completionChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	FinishReason string      `json:"finish_reason"`
}

type chunkJSON struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	// Usage is absent unless the client asked for it
	// (stream_options.include_usage): then null on every chunk but the
	// last, which has the usage and no choices, as OpenAI sends it.
	Usage json.RawMessage `json:"usage,omitempty"`
}

// nullUsage is the usage of a chunk before the last, when it is asked for.
var nullUsage = json.RawMessage("null")

// usageChunk is the last chunk of a stream that asked for usage.
func usageChunk(id, object string, created int64, model string, u *store.Usage) (chunkJSON, error) {
	b, err := json.Marshal(openAIUsage(u))
	return chunkJSON{ID: id, Object: object, Created: created, Model: model, Choices: []chunkChoice{}, Usage: b}, err
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"` // null until the last chunk
}

// chunkDelta is {"role":…}, {"content":…} or, at the end, {}.
type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// openAIUsage is the node's usage, or zeros when it reported none.
func openAIUsage(u *store.Usage) usageJSON {
	if u == nil {
		return usageJSON{}
	}
	return usageJSON{u.PromptTokens, u.CompletionTokens, u.PromptTokens + u.CompletionTokens}
}

// chatStream writes a streaming completion: a chunk with the role once a
// node has the task, a chunk per delta, an empty chunk that says "stop",
// then [DONE]. Like /api/v1/request, "no node" is still a plain HTTP error.
type chatStream struct {
	sse          *sseWriter
	id           string
	created      int64
	model        string
	includeUsage bool
}

func (s *chatStream) chunk(d chunkDelta, finish *string) error {
	c := chunkJSON{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model,
		Choices: []chunkChoice{{Delta: d, FinishReason: finish}}}
	if s.includeUsage {
		c.Usage = nullUsage
	}
	return s.sse.send(c)
}

// end follows the chunk that says "stop": the usage chunk if asked for,
// then [DONE].
func (s *chatStream) end(out tasks.Outcome) {
	if s.includeUsage {
		c, err := usageChunk(s.id, "chat.completion.chunk", s.created, s.model, out.Usage)
		if err != nil || s.sse.send(c) != nil {
			return
		}
	}
	_ = sendDone(s.sse)
}

func (s *chatStream) begin() error              { return s.chunk(chunkDelta{Role: "assistant"}, nil) }
func (s *chatStream) delta(d string) error      { return s.chunk(chunkDelta{Content: &d}, nil) }
func (s *chatStream) httpError(err error) error { return openAITaskError(err) }
func (s *chatStream) fail(code tasks.Code, message string) {
	_ = streamError(s.sse, string(code), message)
}

func (s *chatStream) done(out tasks.Outcome) {
	stop := "stop"
	if s.chunk(chunkDelta{}, &stop) == nil {
		s.end(out)
	}
}

// streamError ends a started stream with an error event and [DONE].
func streamError(sse *sseWriter, code, message string) error {
	if sse.send(openAIErrorBody{Error: openAIErrorDetail{Message: message, Type: "server_error", Code: code}}) == nil {
		_ = sendDone(sse)
	}
	return nil
}

// sendDone writes OpenAI's end of stream, which is not JSON.
func sendDone(s *sseWriter) error {
	s.start()
	if _, err := s.w.Write([]byte("data: [DONE]\n\n")); err != nil {
		return errClientGone
	}
	s.w.Flush()
	return nil
}

// models is GET /v1/models: gemmanet/auto, then a model per capability of
// the nodes online anywhere in the cluster, sorted, then the aliases
// (--model-aliases), sorted, then the static ones.
func (a *App) models(c echo.Context) error {
	var caps []string
	for _, n := range a.dir.List("") {
		caps = append(caps, n.Capabilities...)
	}
	slices.Sort(caps)
	caps = slices.Compact(caps)
	ids := []string{defaultModel}
	for _, cp := range caps {
		if id := modelPrefix + cp; id != defaultModel {
			ids = append(ids, id)
		}
	}
	aliases := slices.Sorted(maps.Keys(a.cfg.ModelAliases))
	for _, al := range aliases {
		if !slices.Contains(ids, al) {
			ids = append(ids, al)
		}
	}
	for _, cp := range staticModels {
		if id := modelPrefix + cp; !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"` // GemmaNet omits it; strict clients require it
		OwnedBy string `json:"owned_by"`
	}
	data := make([]model, len(ids))
	for i, id := range ids {
		data[i] = model{ID: id, Object: "model", OwnedBy: "gemmanet"}
	}
	return c.JSON(http.StatusOK, map[string]any{"object": "list", "data": data})
}

// openAITaskError is a task failure's answer on the OpenAI routes, where
// "no node" is 503 (GemmaNet's choice) rather than /api/v1's 404.
func openAITaskError(err error) *apiError {
	ae := taskError(err)
	if ae.Code == Code(tasks.CodeNoNode) {
		ae.Status = http.StatusServiceUnavailable
	}
	return ae
}

// nodeFailure is the answer to a handler that reported a failure: 502
// node_error with the node's message.
func nodeFailure(out tasks.Outcome) *apiError {
	msg := out.Result
	if msg == "" {
		msg = "Task failed"
	}
	return &apiError{Status: http.StatusBadGateway, Code: CodeNodeError, Message: msg}
}

// openAIErrorBody is OpenAI's error shape, used on the /v1 routes instead
// of /api/v1's.
type openAIErrorBody struct {
	Error openAIErrorDetail `json:"error"`
}

type openAIErrorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

// toOpenAIError is an error answer in OpenAI's shape (handleError writes it
// for every /v1/ route, so auth, rate limits and body limits are covered).
func toOpenAIError(ae *apiError) openAIErrorDetail {
	d := openAIErrorDetail{Message: ae.Message, Type: openAIErrorType(ae.Status), Code: string(ae.Code)}
	switch ae.Status {
	case http.StatusUnauthorized:
		d.Code = "invalid_api_key"
	case http.StatusTooManyRequests:
		d.Code = "rate_limit_exceeded"
		if ae.Code == CodeQuotaExceeded {
			d.Code = "insufficient_quota" // OpenAI's, for a spent quota
		}
	case http.StatusPaymentRequired:
		d.Code = "insufficient_quota"
	}
	return d
}

// openAIErrorType is the OpenAI error type of a status.
func openAIErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}
