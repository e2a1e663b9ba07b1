package server

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"
)

// POST /v1/completions and POST /v1/embeddings (docs/PROTOCOL.md): tasks
// like the chat route's, of the task type their model names
// ("gemmanet/<type>"), else of completionCap and embeddingCap.

const (
	completionCap = "completion"
	embeddingCap  = "embedding"
	maxEmbedInput = 2048 // inputs in one embeddings request (OpenAI's limit)
)

// capabilityOr is the task type a model routes to on a route whose default
// is def: as modelCapability, with def instead of chat.
func capabilityOr(model, def string) string {
	m := strings.TrimSpace(model)
	if len(m) < len(modelPrefix) || !strings.EqualFold(m[:len(modelPrefix)], modelPrefix) {
		return def
	}
	return modelCapability(m)
}

// textBody is a validated POST /v1/completions body.
type textBody struct {
	Model        string
	Prompt       string
	MaxTokens    *int64
	Temperature  *float64
	Stream       bool
	IncludeUsage bool
}

// textParams is what the node receives as params.
type textParams struct {
	Prompt      string   `json:"prompt"`
	MaxTokens   *int64   `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
}

// parseTextBody decodes and checks a completions body: prompt is a string
// or a list of one string (a list of several, or of tokens, is refused:
// one task answers one prompt).
func parseTextBody(b []byte) (textBody, error) {
	var raw struct {
		Model         *string         `json:"model"`
		Prompt        json.RawMessage `json:"prompt"`
		MaxTokens     json.RawMessage `json:"max_tokens"`
		Temperature   json.RawMessage `json:"temperature"`
		Stream        *bool           `json:"stream"`
		StreamOptions json.RawMessage `json:"stream_options"`
	}
	var body textBody
	if err := decodeObject(b, &raw); err != nil {
		return body, err
	}
	if raw.Model == nil {
		return body, invalid("model is required")
	}
	body.Model = *raw.Model
	if err := checkModel(body.Model); err != nil {
		return body, err
	}
	prompts, err := stringList(raw.Prompt, "prompt", 1)
	if err != nil && !errors.Is(err, errTooMany) {
		return body, err
	}
	if len(prompts) != 1 {
		return body, invalid("prompt must be a string or a list of one string")
	}
	body.Prompt = prompts[0]
	if utf8.RuneCountInString(body.Prompt) > maxContentChars {
		return body, errContextLength
	}
	if body.MaxTokens, body.Temperature, err = sampling(raw.MaxTokens, raw.Temperature); err != nil {
		return body, err
	}
	if raw.Stream != nil {
		body.Stream = *raw.Stream
	}
	if body.IncludeUsage, err = includeUsage(raw.StreamOptions); err != nil {
		return body, err
	}
	return body, nil
}

// stringList reads a field that is a string or a list of at most limit
// strings (more: errTooMany, before any is decoded).
func stringList(raw json.RawMessage, field string, limit int) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalid("%s is required", field)
	}
	var one string
	if raw[0] == '"' && unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	if raw[0] != '[' {
		return nil, invalid("%s must be a string or a list of strings", field)
	}
	if wire.CountItems(raw, limit) > limit {
		// Too many; but a list of anything but strings is told so, as
		// it would have been (its first limit+1 items looked at).
		n, notString := 0, errors.New("not a string")
		err := wire.EachItem(raw, func(item []byte) error {
			switch {
			case item[0] != '"':
				return notString
			case n == limit:
				return errTooMany
			}
			n++
			return nil
		})
		if err == notString {
			return nil, invalid("%s must be a string or a list of strings", field)
		}
		return nil, errTooMany
	}
	var list []string
	if err := unmarshal(raw, &list); err != nil {
		return nil, invalid("%s must be a string or a list of strings", field)
	}
	return list, nil
}

// errTooMany is a list longer than stringList's limit.
var errTooMany = errors.New("too many items")

// textCompletions is POST /v1/completions, plain or streaming.
func (a *App) textCompletions(c echo.Context) error {
	body, err := readOpenAIBody(a, c, parseTextBody, "the prompt is longer than "+strconv.Itoa(maxContentChars)+" characters")
	if err != nil {
		return err
	}
	params, err := json.Marshal(textParams{Prompt: body.Prompt, MaxTokens: body.MaxTokens, Temperature: body.Temperature})
	if err != nil {
		return err
	}
	return a.withFallback(c, body.Model, completionCap, func(taskType string) error {
		return a.textTask(c, openAIRequest(c, taskType, body.Prompt, params, body.Stream, ""), body)
	})
}

// textTask runs a text completion's task and answers it.
func (a *App) textTask(c echo.Context, req tasks.Request, body textBody) error {
	s := &textStream{sse: newSSE(c.Response()), id: "cmpl-" + req.TaskID, created: time.Now().Unix(), model: body.Model, includeUsage: body.IncludeUsage}
	if body.Stream && !a.shouldSplit(req.TaskType, req.Content) {
		return a.streamTask(c, req, s.sse, s)
	}
	out, err := a.runTask(c, req, tasks.Hooks{})
	if err != nil {
		return openAITaskError(err)
	}
	if out.Status != tasks.StatusCompleted {
		return nodeFailure(out)
	}
	if body.Stream { // a split task: the whole answer as one chunk
		if s.delta(out.Result) == nil {
			s.done(out)
		}
		return nil
	}
	setServerTiming(c, out)
	stop := "stop"
	return c.JSON(http.StatusOK, textCompletionJSON{ID: s.id, Object: "text_completion", Created: s.created, Model: body.Model,
		Choices: []textChoice{{Text: out.Result, FinishReason: &stop}}, Usage: mustUsage(out.Usage)})
}

// trustOf is the routing restriction a request asks for in its header.
func trustOf(c echo.Context) string {
	if strings.EqualFold(c.Request().Header.Get("X-GemmaNet-Trust"), "official") {
		return "official"
	}
	return "any"
}

type textCompletionJSON struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []textChoice    `json:"choices"`
	Usage   json.RawMessage `json:"usage,omitempty"`
}

type textChoice struct {
	Text         string    `json:"text"`
	Index        int       `json:"index"`
	Logprobs     *struct{} `json:"logprobs"`      // always null
	FinishReason *string   `json:"finish_reason"` // null until the last chunk
}

func mustUsage(u *store.Usage) json.RawMessage {
	b, _ := json.Marshal(openAIUsage(u)) // three integers: cannot fail
	return b
}

// textStream writes a streaming text completion: a chunk per delta, an
// empty one that says "stop", the usage chunk if asked for, then [DONE].
type textStream struct {
	sse          *sseWriter
	id           string
	created      int64
	model        string
	includeUsage bool
}

func (s *textStream) chunk(text string, finish *string) error {
	c := textCompletionJSON{ID: s.id, Object: "text_completion", Created: s.created, Model: s.model,
		Choices: []textChoice{{Text: text, FinishReason: finish}}}
	if s.includeUsage {
		c.Usage = nullUsage
	}
	return s.sse.send(c)
}

func (s *textStream) begin() error              { s.sse.start(); return nil }
func (s *textStream) delta(d string) error      { return s.chunk(d, nil) }
func (s *textStream) httpError(err error) error { return openAITaskError(err) }
func (s *textStream) fail(code tasks.Code, message string) {
	_ = streamError(s.sse, string(code), message)
}

func (s *textStream) done(out tasks.Outcome) {
	stop := "stop"
	if s.chunk("", &stop) != nil {
		return
	}
	if s.includeUsage {
		c := textCompletionJSON{ID: s.id, Object: "text_completion", Created: s.created, Model: s.model,
			Choices: []textChoice{}, Usage: mustUsage(out.Usage)}
		if s.sse.send(c) != nil {
			return
		}
	}
	_ = sendDone(s.sse)
}

// embedBody is a validated POST /v1/embeddings body.
type embedBody struct {
	Model  string
	Input  []string
	Base64 bool // encoding_format "base64": each vector as little-endian float32s, base64
}

func parseEmbedBody(b []byte) (embedBody, error) {
	var raw struct {
		Model          *string         `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat *string         `json:"encoding_format"`
	}
	var body embedBody
	if err := decodeObject(b, &raw); err != nil {
		return body, err
	}
	if raw.Model == nil {
		return body, invalid("model is required")
	}
	body.Model = *raw.Model
	if err := checkModel(body.Model); err != nil {
		return body, err
	}
	in, err := stringList(raw.Input, "input", maxEmbedInput)
	if err != nil && !errors.Is(err, errTooMany) {
		return body, err
	}
	if len(in) < 1 || len(in) > maxEmbedInput {
		return body, invalid("input must have 1-%d items", maxEmbedInput)
	}
	total := 0
	for _, s := range in {
		total += utf8.RuneCountInString(s)
	}
	if total > maxContentChars {
		return body, errContextLength
	}
	body.Input = in
	if raw.EncodingFormat != nil {
		switch *raw.EncodingFormat {
		case "float":
		case "base64":
			body.Base64 = true
		default:
			return body, invalid("encoding_format must be float or base64")
		}
	}
	return body, nil
}

// embeddings is POST /v1/embeddings: one task whose node receives the
// inputs as params.input (and, joined by newlines, as content) and answers
// a JSON list of vectors, one per input (a single input may be answered
// with the vector alone).
func (a *App) embeddings(c echo.Context) error {
	body, err := readOpenAIBody(a, c, parseEmbedBody, "the inputs are longer than "+strconv.Itoa(maxContentChars)+" characters in all")
	if err != nil {
		return err
	}
	params, err := json.Marshal(map[string]any{"input": body.Input})
	if err != nil {
		return err
	}
	var out tasks.Outcome
	err = a.withFallback(c, body.Model, embeddingCap, func(taskType string) error {
		req := openAIRequest(c, taskType, strings.Join(body.Input, "\n"), params, false, "")
		var err error
		if out, err = a.runWhole(c, req, tasks.Hooks{}); err != nil {
			return openAITaskError(err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if out.Status != tasks.StatusCompleted {
		return nodeFailure(out)
	}
	vecs, err := parseVectors(out.Result, len(body.Input))
	if err != nil {
		return &apiError{Status: http.StatusBadGateway, Code: CodeNodeError, Message: "the node's answer is not an embedding: " + err.Error()}
	}
	type item struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	data := make([]item, len(vecs))
	for i, v := range vecs {
		data[i] = item{Object: "embedding", Index: i, Embedding: v}
		if body.Base64 {
			data[i].Embedding = base64Vector(v)
		}
	}
	var prompt int64
	if out.Usage != nil {
		prompt = out.Usage.PromptTokens
	}
	setServerTiming(c, out)
	return c.JSON(http.StatusOK, map[string]any{"object": "list", "data": data, "model": body.Model,
		"usage": map[string]int64{"prompt_tokens": prompt, "total_tokens": prompt}})
}

// parseVectors reads a node's embeddings: a list of n vectors of numbers,
// or, for n = 1, the vector alone.
func parseVectors(result string, n int) ([][]float64, error) {
	var vecs [][]float64
	if err := json.Unmarshal([]byte(result), &vecs); err != nil {
		var one []float64
		if n != 1 || json.Unmarshal([]byte(result), &one) != nil {
			return nil, errors.New("want a JSON list of " + strconv.Itoa(n) + " lists of numbers")
		}
		vecs = [][]float64{one}
	}
	if len(vecs) != n {
		return nil, errors.New(strconv.Itoa(len(vecs)) + " vectors for " + strconv.Itoa(n) + " inputs")
	}
	for _, v := range vecs {
		if len(v) == 0 {
			return nil, errors.New("an empty vector")
		}
	}
	return vecs, nil
}

// base64Vector is OpenAI's base64 encoding of a vector: its float32s,
// little-endian.
func base64Vector(v []float64) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(f)))
	}
	return base64.StdEncoding.EncodeToString(b)
}
