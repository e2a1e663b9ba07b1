package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	segjson "github.com/segmentio/encoding/json"

	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/tasks"
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
	Priority int    // 0–9 (ours), nodes.DefaultPriority when absent
	// NodeLabels are labels the node must have declared (ours); nil for any.
	NodeLabels map[string]string
	// Retries is how many times the task may run again on another node
	// after its node failed it (ours, 0–3): -1 when absent (the instance's
	// --task-retries).
	Retries int
}

// parseTaskBody decodes and checks a request body. Every error wraps
// errInvalidBody and names the field and the rule broken.
func parseTaskBody(b []byte) (taskBody, error) {
	var raw struct {
		TaskType *string         `json:"task_type"`
		Content  *string         `json:"content"`
		Params   json.RawMessage `json:"params"`
		Stream   *bool           `json:"stream"`
		Trust    *string         `json:"trust"`
		APIKey   *string         `json:"api_key"` // deprecated; keyFromBody reads it, this checks its type
		Priority *int            `json:"priority"`
		Labels   json.RawMessage `json:"node_labels"`
		Retries  *int            `json:"retries"`
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
	if err := checkTaskType("task_type", *raw.TaskType); err != nil {
		return t, err
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
	t.Retries = -1
	if raw.Retries != nil {
		if *raw.Retries < 0 || *raw.Retries > tasks.MaxTaskRetries {
			return t, invalid("retries must be an integer from 0 to %d (how many times the task may run again on another node if its node fails it)", tasks.MaxTaskRetries)
		}
		t.Retries = *raw.Retries
	}
	if raw.Trust != nil {
		switch *raw.Trust {
		case "any", "official":
			t.Trust = *raw.Trust
		default:
			return t, invalid(`trust must be "any" or "official"`)
		}
	}
	labels, err := decodeLabels(raw.Labels)
	if err != nil {
		return t, err
	}
	if err := nodes.CheckLabels("node_labels", labels); err != nil {
		return t, invalid("%s", err)
	}
	if len(labels) > 0 {
		t.NodeLabels = labels
	}
	return t, nil
}

// decodeLabels reads node_labels: absent, null or an object of strings,
// counted before it is decoded (a map entry costs some 60 bytes, a hostile
// member 5: "":"",).
func decodeLabels(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, invalid("node_labels has the wrong type (%s)", jsonKind(raw))
	}
	if wire.CountItems(raw, nodes.MaxLabels) > nodes.MaxLabels {
		return nil, invalid("node_labels has more than %d labels", nodes.MaxLabels)
	}
	var labels map[string]string
	if err := unmarshal(raw, &labels); err != nil {
		return nil, invalid("node_labels must be an object of strings")
	}
	return labels, nil
}

// jsonKind names the kind of a JSON value as encoding/json's type errors do.
func jsonKind(raw []byte) string {
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

// checkTaskType applies the rule of a task type, wherever a client names
// one (task_type; a model "gemmanet/<type>" on the OpenAI routes): 1 to
// maxTaskTypeChars characters, none of them a control character. The type
// goes into every record of the task (the history, the usage ledger's key,
// the metrics' labels), so every route applies the same rule before
// anything is stored: PostgreSQL refused a 9,000-character one in the
// usage ledger's key, and a NUL in any text column.
func checkTaskType(field, tt string) error {
	if n := utf8.RuneCountInString(tt); n < 1 || n > maxTaskTypeChars {
		return invalid("%s must be 1-%d characters", field, maxTaskTypeChars)
	}
	if strings.IndexFunc(tt, unicode.IsControl) >= 0 {
		return invalid("%s must not contain control characters", field)
	}
	return nil
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
	if err := wire.CheckBounds(b); err != nil { // before any decoder (invariant 16)
		return invalid("the body %s", strings.TrimPrefix(err.Error(), wire.ErrOutOfBounds.Error()+": "))
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

// unmarshal decodes a part of a body that decoded (so within its bounds),
// by decodeObject's two readers.
func unmarshal(b []byte, v any) error {
	if segjson.Unmarshal(b, v) == nil {
		return nil
	}
	return json.Unmarshal(b, v)
}

// decodeOne decodes b, one JSON object, into v through a json.Decoder,
// with errors a client can act on: the type of a field, or b holding more
// than the object.
func decodeOne(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return invalid("%s has the wrong type (%s)", te.Field, clip(te.Value, 40))
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
//
// params is read in place, value by value (paramsReader), not decoded
// into maps and slices: those cost 30-50 bytes for each 2 or 3 of a
// hostile list ("0,", "[],"), and params may be 128 KiB before it is
// compacted (invariant 16; TestBodyDecodersAreBounded).
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
	if !json.Valid(p) {
		return nil, invalid("params is not valid JSON")
	}
	r := paramsReader{b: p, lim: taskParamLimits}
	if err := r.params(nil); err != nil {
		return nil, err
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

// paramsReader checks a params object that is valid JSON (json.Valid)
// against the rules of checkParams, reading it once, in place. A chat
// completion's body, which becomes its params, is read by it too, within
// other limits (chatParamLimits).
type paramsReader struct {
	b     []byte
	i     int
	lim   paramLimits
	where string // what a value's error names: lim.where, else the key read
}

// paramLimits are the rules paramsReader applies.
type paramLimits struct {
	keys        int    // distinct top-level keys
	depth       int    // levels, the object read being 1
	stringChars int    // characters in a string; 0 for no limit
	object      string // what errors call the object read ("params")
	key         string // what errors call one of its keys ("params key")
	where       string // what value errors name; "" for the key of the value
}

// taskParamLimits are /api/v1/request's params rules.
var taskParamLimits = paramLimits{keys: maxParamKeys, depth: maxParamDepth, stringChars: maxParamStringChars,
	object: "params", key: "params key", where: "params"}

// params reads the top-level object: at most lim.keys distinct keys, each
// an identifier, and each value within the rules. each, when not nil, is
// given each member as it is read: its key and its value as sent.
func (r *paramsReader) params(each func(key string, value []byte)) error {
	var keys []string // distinct, at most lim.keys+1: a repeated key counts once, as a node reads it
	r.i++             // '{'
	for r.space() != '}' {
		if r.i >= len(r.b) { // not after json.Valid
			return invalid("%s is not valid JSON", r.lim.object)
		}
		if r.b[r.i] == ',' {
			r.i++
			r.space()
		}
		raw := r.stringRaw()
		var k string
		if err := json.Unmarshal(raw, &k); err != nil {
			return invalid("%s is not valid JSON", r.lim.object)
		}
		if !isIdentifier(k) || utf8.RuneCountInString(k) > maxParamKeyChars || k == "content" {
			return invalid("%s %q must be an identifier of at most %d characters, and not \"content\"", r.lim.key, clip(k, 80), maxParamKeyChars)
		}
		if !slices.Contains(keys, k) {
			if keys = append(keys, k); len(keys) > r.lim.keys {
				return invalid("%s must have at most %d keys", r.lim.object, r.lim.keys)
			}
		}
		r.space() // ':'
		r.i++
		if r.where = r.lim.where; r.where == "" {
			r.where = k
		}
		r.space()
		start := r.i
		if err := r.value(2); err != nil {
			return err
		}
		if each != nil {
			each(k, r.b[start:r.i])
		}
	}
	return nil
}

// value reads the value at r.i, at depth (params itself is 1).
func (r *paramsReader) value(depth int) error {
	if r.space() == 0 { // not after json.Valid
		return invalid("%s is not valid JSON", r.lim.object)
	}
	switch c := r.b[r.i]; c {
	case '"':
		if err := r.checkString(); err != nil {
			return err
		}
	case '{', '[':
		if depth > r.lim.depth {
			return invalid("%s must not nest deeper than %d levels", r.where, r.lim.depth)
		}
		end := byte(']')
		if c == '{' {
			end = '}'
		}
		r.i++
		for r.space() != end {
			if r.i >= len(r.b) { // not after json.Valid
				return invalid("%s is not valid JSON", r.lim.object)
			}
			if r.b[r.i] == ',' {
				r.i++
				r.space()
			}
			if c == '{' {
				if err := r.checkString(); err != nil {
					return err
				}
				r.space() // ':'
				r.i++
			}
			if err := r.value(depth + 1); err != nil {
				return err
			}
		}
		r.i++
	case 't', 'f', 'n':
		for r.i < len(r.b) && r.b[r.i] >= 'a' && r.b[r.i] <= 'z' {
			r.i++
		}
	default:
		start := r.i
		for r.i < len(r.b) && strings.IndexByte("+-.0123456789eE", r.b[r.i]) >= 0 {
			r.i++
		}
		return checkNumber(r.where, r.b[start:r.i])
	}
	return nil
}

// checkString reads the string at r.i, within lim.stringChars.
func (r *paramsReader) checkString() error {
	s := r.stringRaw()
	if r.lim.stringChars > 0 && stringChars(s) > r.lim.stringChars {
		return invalid("strings in %s must be at most %d characters", r.where, r.lim.stringChars)
	}
	return nil
}

// space skips white space and returns the index of the next byte (or of
// the end).
func (r *paramsReader) space() byte {
	r.i = wire.SkipSpace(r.b, r.i)
	if r.i >= len(r.b) {
		return 0
	}
	return r.b[r.i]
}

// stringRaw returns the string at r.i, quotes and escapes included, and
// moves past it.
func (r *paramsReader) stringRaw() []byte {
	end, err := wire.SkipString(r.b, r.i)
	if err != nil { // not after json.Valid
		end = len(r.b)
	}
	s := r.b[r.i:end]
	r.i = end
	return s
}

// stringChars is how many characters the JSON string raw (quoted, valid)
// holds once decoded: an escape is one, a surrogate pair one, as
// encoding/json decodes them.
func stringChars(raw []byte) int {
	n := 0
	for i := 1; i < len(raw)-1; n++ {
		if raw[i] != '\\' {
			_, size := utf8.DecodeRune(raw[i:])
			i += size
			continue
		}
		if raw[i+1] != 'u' {
			i += 2
			continue
		}
		r1 := hex4(raw[i+2 : i+6])
		i += 6
		if utf16.IsSurrogate(r1) && i+6 <= len(raw)-1 && raw[i] == '\\' && raw[i+1] == 'u' &&
			utf16.DecodeRune(r1, hex4(raw[i+2:i+6])) != utf8.RuneError {
			i += 6 // the pair is one character
		}
	}
	return n
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// checkNumber refuses what a node cannot hold: a number beyond a float64's
// range (1e999999 fails to decode in Go, becomes inf in Python), and an
// integer beyond 2^53, which a Go or JavaScript node would silently read as
// another number (and Python refuses past 4,300 digits). Tiny numbers that
// round to 0 are accepted: every decoder reads them as 0 without failing.
func checkNumber(where string, n []byte) error {
	if !bytes.ContainsAny(n, ".eE") {
		digits := bytes.TrimPrefix(n, []byte("-"))
		var i int64
		ok := len(digits) <= 16 // 2^53 has 16 digits: no overflow below
		for _, d := range digits {
			i = i*10 + int64(d-'0')
		}
		if !ok || i > maxParamInt {
			return invalid("integers in %s must be between -2^53 and 2^53 (%d); send larger ones as strings (got %s)", where, int64(maxParamInt), clip(string(n), 40))
		}
		return nil
	}
	if _, err := strconv.ParseFloat(string(n), 64); err != nil {
		return invalid("numbers in %s must fit a 64-bit float (at most about 1.8e308 in size; got %s)", where, clip(string(n), 40))
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

// headerRetries is the request header that asks how many times a task may
// run again on another node if its node fails it (ours, 0–3): for the
// OpenAI-style routes, whose bodies are OpenAI's; a native route's body
// field "retries" wins over it.
const headerRetries = "X-Task-Retries"

// retriesOf is tasks.Request.Retries for a request whose body asked for
// body retries (-1: it did not ask): the body's, else the header's, else 0
// (the instance's --task-retries).
func retriesOf(c echo.Context, body int) (int, error) {
	n := body
	if n < 0 {
		h := c.Request().Header.Get(headerRetries)
		if h == "" {
			return 0, nil
		}
		v, err := strconv.Atoi(h)
		if err != nil || v < 0 || v > tasks.MaxTaskRetries {
			return 0, newError(http.StatusBadRequest, CodeInvalidRequest,
				fmt.Sprintf("%s must be an integer from 0 to %d (how many times the task may run again on another node if its node fails it)", headerRetries, tasks.MaxTaskRetries))
		}
		n = v
	}
	if n == 0 {
		return -1, nil // none
	}
	return n, nil
}
