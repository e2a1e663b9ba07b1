package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzEachItem holds EachItem and CountItems to encoding/json's reading:
// on a valid array, the items are those json.Unmarshal gives as raw
// messages, and the count is theirs (capped at limit+1); on anything else
// they only return.
func FuzzEachItem(f *testing.F) {
	for _, s := range []string{`[]`, ` [ 1 , "a,]" , [2,[3]] , {"k":"}"} , null ] `, `[1`, `["\"",true]`, `{"a":1,"b":[1,2]}`, `{}`, `[[],{}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if json.Valid(b) {
			if n, all := values(t, b), CountAll(b, 1<<20); all < n {
				t.Fatalf("CountAll(%q) = %d, fewer than its %d values", b, all, n)
			}
		}
		var got [][]byte
		err := EachItem(b, func(item []byte) error { got = append(got, item); return nil })
		counted := CountItems(b, 3)
		var want []json.RawMessage
		if json.Unmarshal(b, &want) != nil || want == nil { // null decodes into a list, as nothing
			var obj map[string]json.RawMessage
			if json.Valid(b) && bytes.TrimSpace(b)[0] == '{' && json.Unmarshal(b, &obj) == nil {
				var members int
				dec := json.NewDecoder(bytes.NewReader(b))
				_, _ = dec.Token()
				for dec.More() {
					_, _ = dec.Token()
					var v json.RawMessage
					_ = dec.Decode(&v)
					members++
				}
				if counted != min(members, 4) {
					t.Fatalf("CountItems(%q) = %d, want %d", b, counted, min(members, 4))
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("EachItem(%q): %v, but it is an array", b, err)
		}
		if len(got) != len(want) {
			t.Fatalf("EachItem(%q) gave %d items, want %d", b, len(got), len(want))
		}
		for i := range got {
			var g, w bytes.Buffer
			if json.Compact(&g, got[i]) != nil || json.Compact(&w, want[i]) != nil || g.String() != w.String() {
				t.Fatalf("EachItem(%q) item %d = %q, want %q", b, i, got[i], want[i])
			}
		}
		if counted != min(len(want), 4) {
			t.Fatalf("CountItems(%q, 3) = %d, want %d", b, counted, min(len(want), 4))
		}
	})
}

// values is how many values the valid JSON b holds at every depth (an
// object's keys are not values).
func values(t *testing.T, b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type open struct{ object, key bool } // key: an object's next token is a key
	var stack []open
	n := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if tok == json.Delim(']') || tok == json.Delim('}') {
			stack = stack[:len(stack)-1]
			continue
		}
		if k := len(stack); k > 0 && stack[k-1].object {
			if stack[k-1].key {
				stack[k-1].key = false
				continue
			}
			stack[k-1].key = true
		}
		n++
		if tok == json.Delim('[') || tok == json.Delim('{') {
			stack = append(stack, open{object: tok == json.Delim('{'), key: true})
		}
	}
}

func TestEachItemStopsAtTheFirstError(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	err := EachItem([]byte(`[1,2,3]`), func([]byte) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if err != stop || n != 2 {
		t.Fatalf("EachItem returned %v after %d items, want stop after 2", err, n)
	}
}
