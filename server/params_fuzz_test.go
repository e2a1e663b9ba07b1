package server

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCheckParamsAgrees holds checkParams, which reads params in place, to
// checkParamsByMaps, its first form, which decoded them into maps and
// slices: the same verdict and the same compacted params, but where a key
// is repeated (the first form judged only the last value of a key, as
// nodes read it; checkParams judges every one, so it may refuse more).
func FuzzCheckParamsAgrees(f *testing.F) {
	for _, s := range []string{
		`{"a":1}`, `{"a":[[[[1]]]]}`, `{"a":[[[1]]]}`, `{"content":1}`, `{"\u0063ontent":1}`, `{"a":1e999}`,
		`{"a":9007199254740993}`, `{"a":-9007199254740992}`, `{"a":"\ud83d\ude00"}`, `{"a":{"b":"\ud800\u0041"}}`,
		`{"a":1,"a":1e999}`, `{"é":true,"_x":null}`, `{"1a":1}`, ` { "a" : [ 1 , 2 ] } `, `{"a":0.1e-400}`, `[]`, `null`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := checkParams(b)
		want, werr := checkParamsByMaps(b)
		switch {
		case gerr == nil && werr == nil:
			if !bytes.Equal(got, want) {
				t.Fatalf("checkParams(%q) = %s, first form %s", b, got, want)
			}
		case gerr == nil:
			t.Fatalf("checkParams(%q) accepted what the first form refused: %v", b, werr)
		case werr == nil && !repeatsAKey(b):
			t.Fatalf("checkParams(%q) refused what the first form accepted: %v", b, gerr)
		}
	})
}

// repeatsAKey reports whether an object in the JSON b repeats a key.
func repeatsAKey(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type open struct {
		object bool
		keys   map[string]bool
		key    bool // the next token of an object is a key
	}
	var stack []*open
	for {
		tok, err := dec.Token()
		if err == io.EOF || err != nil {
			return false
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].key {
			if k, ok := tok.(string); ok {
				if stack[n-1].keys[k] {
					return true
				}
				stack[n-1].keys[k] = true
				stack[n-1].key = false
				continue
			}
		}
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].key = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &open{object: true, keys: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &open{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// checkParams checks params and returns it compacted ("{}" when absent).
// Keys become handler keyword arguments on the node, so they must be
// identifiers and never "content". Everything accepted here must decode on
// a node as it will decode it: a request a node cannot read would wait for
// its deadline and be counted against a node of another account
// (invariant 15), so it is refused here with 422 instead.
func checkParamsByMaps(p json.RawMessage) (json.RawMessage, error) {
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
		if err := checkValueByMaps(v, 2); err != nil {
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

func checkValueByMaps(v any, depth int) error {
	switch x := v.(type) {
	case json.Number:
		return checkNumberByMaps(x)
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
			if err := checkValueByMaps(e, depth+1); err != nil {
				return err
			}
		}
	case []any:
		if depth > maxParamDepth {
			return invalid("params must not nest deeper than %d levels", maxParamDepth)
		}
		for _, e := range x {
			if err := checkValueByMaps(e, depth+1); err != nil {
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
func checkNumberByMaps(n json.Number) error {
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
