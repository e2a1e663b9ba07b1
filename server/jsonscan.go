package server

import "errors"

// Reading a JSON array item by item, so that a list a client sends costs
// what its items cost and not a Go value per item first: a decoder spends
// 16 to 100 bytes on each item it puts in a slice, and the items of a
// hostile list are 2 or 3 bytes ("0," or "{},"), so a 2 MB list of them
// cost 20-100 times its size (TestBodyDecodersAreBounded). The input is a
// json.RawMessage of a body that decoded, so valid JSON; what is not comes
// back as errNotJSON, never a panic (FuzzEachItem).

var errNotJSON = errors.New("not valid JSON")

// eachItem calls f with each item of the JSON array raw, in order, and
// stops at f's first error, which it returns. raw not an array is
// errNotJSON.
func eachItem(raw []byte, f func(item []byte) error) error {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return errNotJSON
	}
	i = skipSpace(raw, i+1)
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
		i = skipSpace(raw, end)
		switch {
		case i >= len(raw):
			return errNotJSON
		case raw[i] == ']':
			return nil
		case raw[i] != ',':
			return errNotJSON
		}
		i = skipSpace(raw, i+1)
	}
	return errNotJSON
}

// countItems is how many items the JSON array or object raw holds (an
// object's members), counting no further than limit+1: enough to refuse
// one over a limit before decoding it. raw must be valid JSON; what is not
// may count anything but never panics.
func countItems(raw []byte, limit int) int {
	i := skipSpace(raw, 0)
	if i >= len(raw) || (raw[i] != '[' && raw[i] != '{') {
		return 0
	}
	if j := skipSpace(raw, i+1); j < len(raw) && (raw[j] == ']' || raw[j] == '}') {
		return 0
	}
	n, depth := 1, 0
	for ; i < len(raw) && n <= limit; i++ {
		switch raw[i] {
		case '"':
			end, err := skipString(raw, i)
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

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errNotJSON
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '[', '{':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, err := skipString(b, i)
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
		return 0, errNotJSON
	}
	start := i // a number, true, false or null: up to what ends it
	for i < len(b) && b[i] != ',' && b[i] != ']' && b[i] != '}' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	if i == start {
		return 0, errNotJSON
	}
	return i, nil
}

// skipString returns the end of the string whose opening quote is b[i].
func skipString(b []byte, i int) (int, error) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, errNotJSON
}
