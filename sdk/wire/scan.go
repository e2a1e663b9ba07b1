package wire

import (
	"bytes"
	"errors"
)

// Reading a JSON list without decoding it, so that a list a client or a
// node sends costs what its items cost and not a Go value per item first:
// a decoder spends 16 to 100 bytes on each item it puts in a slice, and
// the items of a hostile list are 2 or 3 bytes ("0," or "{},"), so a 2 MB
// list of them cost 20-100 times its size (server's
// TestBodyDecodersAreBounded). The input is a json.RawMessage of a message
// that decoded, so valid JSON; what is not comes back as ErrNotJSON, never
// a panic (FuzzEachItem).

// ErrNotJSON is EachItem's and SkipString's error for what is not JSON.
var ErrNotJSON = errors.New("not valid JSON")

// EachItem calls f with each item of the JSON array raw, in order, and
// stops at f's first error, which it returns. raw not an array is
// ErrNotJSON.
func EachItem(raw []byte, f func(item []byte) error) error {
	i := SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return ErrNotJSON
	}
	i = SkipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return nil
	}
	for i < len(raw) {
		end, err := skipValue(raw, i)
		if err != nil {
			return err
		}
		if err := f(raw[i:end]); err != nil {
			return err
		}
		i = SkipSpace(raw, end)
		switch {
		case i >= len(raw):
			return ErrNotJSON
		case raw[i] == ']':
			return nil
		case raw[i] != ',':
			return ErrNotJSON
		}
		i = SkipSpace(raw, i+1)
	}
	return ErrNotJSON
}

// CountItems is how many items the JSON array or object raw holds (an
// object's members), counting no further than limit+1: enough to refuse
// one over a limit before decoding it. raw must be valid JSON; what is not
// may count anything but never panics.
func CountItems(raw []byte, limit int) int {
	i := SkipSpace(raw, 0)
	if i >= len(raw) || (raw[i] != '[' && raw[i] != '{') {
		return 0
	}
	if j := SkipSpace(raw, i+1); j < len(raw) && (raw[j] == ']' || raw[j] == '}') {
		return 0
	}
	n, depth := 1, 0
	for ; i < len(raw) && n <= limit; i++ {
		switch raw[i] {
		case '"':
			end, err := SkipString(raw, i)
			if err != nil {
				return n
			}
			i = end - 1
		case '[', '{':
			depth++
		case ']', '}':
			if depth--; depth == 0 {
				return n
			}
		case ',':
			if depth == 1 {
				n++
			}
		}
	}
	return n
}

// CountAll is how many values the JSON value raw holds at every depth,
// about: a container counts as one more item than it holds, so the count
// is at least the number of values; counting stops past limit. It is for
// a value that is decoded whole into Go values (a map[string]any), to
// bound what that costs before paying it.
func CountAll(raw []byte, limit int) int {
	n := 1
	for i := 0; i < len(raw) && n <= limit; i++ {
		switch raw[i] {
		case '"':
			end, err := SkipString(raw, i)
			if err != nil {
				return n
			}
			i = end - 1
		case ',', '[', '{':
			n++
		}
	}
	return n
}

// SkipSpace returns the index of the first byte of b from i on that is
// not JSON white space (len(b) if none).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, ErrNotJSON
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '[', '{':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, err := SkipString(b, i)
				if err != nil {
					return 0, err
				}
				i = end - 1
			case '[', '{':
				depth++
			case ']', '}':
				if depth--; depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, ErrNotJSON
	}
	start := i // a number, true, false or null: up to what ends it
	for i < len(b) && b[i] != ',' && b[i] != ']' && b[i] != '}' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	if i == start {
		return 0, ErrNotJSON
	}
	return i, nil
}

// SkipString returns the end of the JSON string whose opening quote is
// b[i]: the index after its closing quote.
func SkipString(b []byte, i int) (int, error) {
	for { // to the next quote not escaped: strings are most of the bytes
		j := bytes.IndexByte(b[i+1:], '"')
		if j < 0 {
			return 0, ErrNotJSON
		}
		i += 1 + j
		run := 0 // the backslashes before it: an odd run escapes it
		for k := i - 1; b[k] == '\\'; k-- {
			run++
		}
		if run%2 == 0 {
			return i + 1, nil
		}
	}
}
