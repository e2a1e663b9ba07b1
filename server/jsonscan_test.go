package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzEachItem holds eachItem and countItems to encoding/json's reading:
// on a valid array, the items are those json.Unmarshal gives as raw
// messages, and the count is theirs (capped at limit+1); on anything else
// they only return.
func FuzzEachItem(f *testing.F) {
	for _, s := range []string{`[]`, ` [ 1 , "a,]" , [2,[3]] , {"k":"}"} , null ] `, `[1`, `["\"",true]`, `{"a":1,"b":[1,2]}`, `{}`, `[[],{}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got [][]byte
		err := eachItem(b, func(item []byte) error { got = append(got, item); return nil })
		counted := countItems(b, 3)
		var want []json.RawMessage
		if json.Unmarshal(b, &want) != nil {
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
					t.Fatalf("countItems(%q) = %d, want %d", b, counted, min(members, 4))
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("eachItem(%q): %v, but it is an array", b, err)
		}
		if len(got) != len(want) {
			t.Fatalf("eachItem(%q) gave %d items, want %d", b, len(got), len(want))
		}
		for i := range got {
			var g, w bytes.Buffer
			if json.Compact(&g, got[i]) != nil || json.Compact(&w, want[i]) != nil || g.String() != w.String() {
				t.Fatalf("eachItem(%q) item %d = %q, want %q", b, i, got[i], want[i])
			}
		}
		if counted != min(len(want), 4) {
			t.Fatalf("countItems(%q, 3) = %d, want %d", b, counted, min(len(want), 4))
		}
	})
}

func TestEachItemStopsAtTheFirstError(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	err := eachItem([]byte(`[1,2,3]`), func([]byte) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if err != stop || n != 2 {
		t.Fatalf("eachItem returned %v after %d items, want stop after 2", err, n)
	}
}
