package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	segjson "github.com/segmentio/encoding/json"

	"github.com/switchyard-dev/switchyard/nodes"
)

// Limits of POST /api/v1/request (docs/PROTOCOL.md).
const (
	maxTaskTypeChars    = 64
	maxContentChars     = 200_000
	maxParamKeys        = 32
	maxParamKeyChars    = 64
	maxParamStringChars = 8192
	maxParamDepth       = 4 // params itself is level 1
	maxParamBytes       = 32 << 10
	// maxParamInt is the largest integer in params: 2^53, the last one a
	// float64 (a Go node's and every JavaScript node's number) holds exactly.
	maxParamInt = 1 << 53
)

// errInvalidBody is the kind of every validation error (422).
var errInvalidBody = errors.New("invalid request body")

// taskBody is a validated POST /api/v1/request body.
type taskBody struct {
	TaskType string
	Content  string
	Params   json.RawMessage // a compact JSON object, "{}" when absent
	Stream   bool
	Trust    string // "any" or "official"
	APIKey   string // deprecated body field; the Authorization header wins
	Priority int    // 0–9 (ours), nodes.DefaultPriority when absent
	// NodeLabels are labels the node must have declared (ours); nil for any.
	NodeLabels map[string]string
}

// parseTaskBody decodes and checks a request body. Every error wraps
// errInvalidBody and names the field and the rule broken.
func parseTaskBody(b []byte) (taskBody, error) {
	var raw struct {
		TaskType *string           `json:"task_type"`
		Content  *string           `json:"content"`
		Params   json.RawMessage   `json:"params"`
		Stream   *bool             `json:"stream"`
		Trust    *string           `json:"trust"`
		APIKey   *string           `json:"api_key"`
		Priority *int              `json:"priority"`
		Labels   map[string]string `json:"node_labels"`
	}
	var t taskBody
	if err := decodeObject(b, &raw); err != nil {
		return t, err
	}
	switch {
	case raw.TaskType == nil:
		return t, invalid("task_type is required")
	case raw.Content == nil:
		return t, invalid("content is required")
	}
	if n := utf8.RuneCountInString(*raw.TaskType); n < 1 || n > maxTaskTypeChars {
		return t, invalid("task_type must be 1-%d characters", maxTaskTypeChars)
	}
	if utf8.RuneCountInString(*raw.Content) > maxContentChars {
		return t, invalid("content must be at most %d characters", maxContentChars)
	}
	params, err := checkParams(raw.Params)
	if err != nil {
		return t, err
	}
	t = taskBody{TaskType: *raw.TaskType, Content: *raw.Content, Params: params, Trust: "any", Priority: nodes.DefaultPriority}
	if raw.Priority != nil {
		if *raw.Priority < 0 || *raw.Priority > nodes.MaxPriority {
			return t, invalid("priority must be an integer from 0 to %d (higher is served first; default %d)", nodes.MaxPriority, nodes.DefaultPriority)
		}
		t.Priority = *raw.Priority
	}
	if raw.Stream != nil {
		t.Stream = *raw.Stream
	}
	if raw.Trust != nil {
		switch *raw.Trust {
		case "any", "official":
			t.Trust = *raw.Trust
		default:
			return t, invalid(`trust must be "any" or "official"`)
		}
	}
	if raw.APIKey != nil {
		t.APIKey = *raw.APIKey
	}
	if err := nodes.CheckLabels("node_labels", raw.Labels); err != nil {
		return t, invalid("%s", err)
	}
	if len(raw.Labels) > 0 {
		t.NodeLabels = raw.Labels
	}
	return t, nil
}

// HeaderNodeLabels names labels a request's node must have, as
// key=value pairs separated by commas: for clients that cannot add a body
// field (the OpenAI routes), and beside node_labels on the others.
const HeaderNodeLabels = "X-Node-Labels"

const ctxNodeLabels = "switchyard.node_labels"

// nodeLabels is what a request demands of its node's labels: the
// X-Node-Labels header's and body's (which may be nil), joined. A label
// both name must have one value. The header is read once per request.
func nodeLabels(c echo.Context, body map[string]string) (map[string]string, error) {
	raw := c.Request().Header.Get(HeaderNodeLabels)
	if raw == "" {
		return body, nil // the common case: nothing to parse or keep
	}
	header, ok := c.Get(ctxNodeLabels).(map[string]string)
	if !ok {
		var err error
		if header, err = parseNodeLabels(raw); err != nil {
			return nil, newError(http.StatusUnprocessableEntity, CodeInvalidRequest, err.Error())
		}
		c.Set(ctxNodeLabels, header)
	}
	if len(header) == 0 {
		return body, nil
	}
	if len(body) == 0 {
		return header, nil
	}
	joined := maps.Clone(body)
	for k, v := range header {
		if b, ok := joined[k]; ok && b != v {
			return nil, newError(http.StatusUnprocessableEntity, CodeInvalidRequest,
				fmt.Sprintf("the label %q is %q in node_labels and %q in %s", k, b, v, HeaderNodeLabels))
		}
		joined[k] = v
	}
	if err := nodes.CheckLabels("node_labels and "+HeaderNodeLabels, joined); err != nil {
		return nil, newError(http.StatusUnprocessableEntity, CodeInvalidRequest, err.Error())
	}
	return joined, nil
}

// parseNodeLabels reads an X-Node-Labels header: "region=eu,gpu=a100".
// Blank pairs are skipped; an empty header is no label.
func parseNodeLabels(h string) (map[string]string, error) {
	if strings.TrimSpace(h) == "" {
		return map[string]string{}, nil
	}
	labels := map[string]string{}
	for pair := range strings.SplitSeq(h, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return nil, fmt.Errorf("%s: %q is not key=value", HeaderNodeLabels, clip(pair, 80))
		}
		if prev, dup := labels[k]; dup && prev != v {
			return nil, fmt.Errorf("%s names %q twice", HeaderNodeLabels, k)
		}
		labels[k] = v
	}
	if err := nodes.CheckLabels(HeaderNodeLabels, labels); err != nil {
		return nil, err
	}
	return labels, nil
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errInvalidBody, fmt.Sprintf(format, a...))
}

// decodeObject decodes a JSON object into v, with errors a client can act on.
func decodeObject(b []byte, v any) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return invalid("the body must be a JSON object")
	}
	// The common case in one pass over b, without a Decoder's copy of it,
	// by segmentio/encoding/json: a task body in a quarter to a third of
	// encoding/json's time (BenchmarkDecodeTaskBody), with its reading
	// wherever it accepts one (FuzzDecodeObjectAgrees). A body it refuses is read again by
	// decodeOne, for encoding/json's verdict and the error to give.
	if segjson.Unmarshal(b, v) == nil {
		return nil
	}
	return decodeOne(b, v)
}

// decodeOne decodes b, one JSON object, into v through a json.Decoder,
// with errors a client can act on: the type of a field, or b holding more
// than the object.
func decodeOne(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return invalid("%s has the wrong type (%s)", te.Field, te.Value)
		}
		return invalid("the body is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("the body must hold one JSON object")
	}
	return nil
}

// checkParams checks params and returns it compacted ("{}" when absent).
// Keys become handler keyword arguments on the node, so they must be
// identifiers and never "content". Everything accepted here must decode on
// a node as it will decode it: a request a node cannot read would wait for
// its deadline and be counted against a node of another account
// (invariant 15), so it is refused here with 422 instead.
func checkParams(p json.RawMessage) (json.RawMessage, error) {
	p = bytes.TrimSpace(p)
	if len(p) == 0 || string(p) == "null" {
		return json.RawMessage("{}"), nil
	}
	if p[0] != '{' {
		return nil, invalid("params must be an object")
	}
	// Passed to the node byte for byte, in a WebSocket text frame: invalid
	// UTF-8 there makes a strict node client drop the whole connection.
	if !utf8.Valid(p) {
		return nil, invalid("params must be valid UTF-8")
	}
	if len(p) > 4*maxParamBytes {
		return nil, invalid("params must be at most %d bytes as JSON", maxParamBytes)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, invalid("params is not valid JSON")
	}
	if len(m) > maxParamKeys {
		return nil, invalid("params must have at most %d keys", maxParamKeys)
	}
	for k, v := range m {
		if !isIdentifier(k) || utf8.RuneCountInString(k) > maxParamKeyChars || k == "content" {
			return nil, invalid("params key %q must be an identifier of at most %d characters, and not \"content\"", clip(k, 80), maxParamKeyChars)
		}
		if err := checkValue(v, 2); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, p); err != nil {
		return nil, invalid("params is not valid JSON")
	}
	if buf.Len() > maxParamBytes {
		return nil, invalid("params must be at most %d bytes as JSON", maxParamBytes)
	}
	return buf.Bytes(), nil
}

func checkValue(v any, depth int) error {
	switch x := v.(type) {
	case json.Number:
		return checkNumber(x)
	case string:
		if utf8.RuneCountInString(x) > maxParamStringChars {
			return invalid("strings in params must be at most %d characters", maxParamStringChars)
		}
	case map[string]any:
		if depth > maxParamDepth {
			return invalid("params must not nest deeper than %d levels", maxParamDepth)
		}
		for k, e := range x {
			if utf8.RuneCountInString(k) > maxParamStringChars {
				return invalid("strings in params must be at most %d characters", maxParamStringChars)
			}
			if err := checkValue(e, depth+1); err != nil {
				return err
			}
		}
	case []any:
		if depth > maxParamDepth {
			return invalid("params must not nest deeper than %d levels", maxParamDepth)
		}
		for _, e := range x {
			if err := checkValue(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNumber refuses what a node cannot hold: a number beyond a float64's
// range (1e999999 fails to decode in Go, becomes inf in Python), and an
// integer beyond 2^53, which a Go or JavaScript node would silently read as
// another number (and Python refuses past 4,300 digits). Tiny numbers that
// round to 0 are accepted: every decoder reads them as 0 without failing.
func checkNumber(n json.Number) error {
	s := n.String()
	if !strings.ContainsAny(s, ".eE") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil || i > maxParamInt || i < -maxParamInt {
			return invalid("integers in params must be between -2^53 and 2^53 (%d); send larger ones as strings (got %s)", int64(maxParamInt), clip(s, 40))
		}
		return nil
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return invalid("numbers in params must fit a 64-bit float (at most about 1.8e308 in size; got %s)", clip(s, 40))
	}
	return nil
}

// isIdentifier is Python's str.isidentifier, closely enough: a letter or
// underscore, then letters, digits and underscores.
func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || unicode.IsLetter(r) || (i > 0 && (unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r))) {
			continue
		}
		return false
	}
	return true
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
