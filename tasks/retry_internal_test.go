package tasks

import (
	"encoding/json"
	"testing"
)

// jsonLen is never less than encoding/json's length of the string: the
// dispatcher's bound on a resumed task_assign holds.
func FuzzJSONLenBoundsTheEncoding(f *testing.F) {
	for _, s := range []string{"", "plain", "<a href=\"x\">&</a>", "\b\f\n\r\t\x00\x1f\\", "é😀\u2028\u2029", "\xff\xfe\xc3", "中文"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := jsonLen(s), len(b)-2; got < want || got > 6*len(s) {
			t.Fatalf("jsonLen(%q) = %d; encoding/json writes %d bytes (the bound is at most 6 a byte, %d)", s, got, want, 6*len(s))
		}
	})
}
