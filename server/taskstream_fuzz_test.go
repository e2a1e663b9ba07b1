package server

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzLastEventID: whatever a client sends as Last-Event-ID (or
// ?last_event_id=), the parse never panics, never gives a negative seq,
// and accepts exactly the decimal numbers of at most 18 digits.
func FuzzLastEventID(f *testing.F) {
	for _, s := range []string{"", "0", "4", " 12 ", "007", "-1", "+1", "1e3", "0x10", "999999999999999999",
		"9999999999999999999", "4\r\n", "\x00", "１２", "4 5"} {
		f.Add(s, "")
		f.Add("", s)
	}
	f.Fuzz(func(t *testing.T, header, query string) {
		n, err := lastEventID(header, query)
		v := strings.TrimSpace(header)
		if v == "" {
			v = strings.TrimSpace(query)
		}
		valid := v == "" || len(v) <= maxEventIDDigits && strings.Trim(v, "0123456789") == ""
		if valid != (err == nil) {
			t.Fatalf("lastEventID(%q, %q) = %d, %v; valid %v", header, query, n, err, valid)
		}
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("lastEventID(%q, %q) = %d, negative", header, query, n)
		}
		if v != "" {
			if want, _ := strconv.ParseInt(v, 10, 64); want != n {
				t.Fatalf("lastEventID(%q, %q) = %d, want %d", header, query, n, want)
			}
		}
	})
}
