package sdk

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestSSEReaderEvents(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // each event as id=data, joined by |; then the final error
		end  error
	}{
		{"id: 1\ndata: a\n\nid: 2\ndata: b\n\n", "1=a|2=b", io.EOF},
		{": keep-alive\n\nid: 3\r\ndata: x\r\n\r\n", "3=x", io.EOF},
		{"id: 1\ndata: a\n\nid: 2\ndata: {\"del", "1=a", io.ErrUnexpectedEOF}, // cut mid-line
		{"id: 1\ndata: a\n\nid: 2\ndata: b\n", "1=a", io.ErrUnexpectedEOF},    // cut before the blank line
		{"id: 1\ndata: a\n\nid: 2", "1=a", io.ErrUnexpectedEOF},               // cut after the id
		{"data: no id\n\n", "=no id", io.EOF},                                 // no id field
		{"id: 9\n\n", "9=", io.EOF},                                           // an id alone
		{"id: a\x00b\ndata: x\n\n", "=x", io.EOF},                             // an id with NUL is ignored
		{"id: " + strings.Repeat("9", 300) + "\ndata: x\n\n", "=x", io.EOF},   // so is one too long
		{"event: message\nretry: 10\ndata: a\ndata: b\n\n", "=a\nb", io.EOF},  // other fields skipped
		{"", "", io.EOF},
	} {
		r := newSSEReader(strings.NewReader(tc.in))
		var got []string
		var err error
		for {
			var ev sseEvent
			if ev, err = r.event(); err != nil {
				break
			}
			got = append(got, ev.id+"="+string(ev.data))
		}
		if strings.Join(got, "|") != tc.want || !errors.Is(err, tc.end) {
			t.Errorf("events of %q = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.end)
		}
	}
}

// FuzzSSEReaderEvents: whatever a server sends, event never panics, never
// returns more than it read, and keeps ids bounded and NUL-free.
func FuzzSSEReaderEvents(f *testing.F) {
	f.Add([]byte("id: 1\ndata: {\"delta\":\"a\"}\n\nid: 2\ndata: x\r\n\r\n: c\n"))
	f.Add([]byte("id: 2\ndata: {\"done\":true,\"result\":{}}\n\nid: 3\ndata: cut"))
	f.Add([]byte("id: \x00\n\nid\ndata\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newSSEReader(bytes.NewReader(in))
		for range len(in) + 1 {
			ev, err := r.event()
			if err != nil {
				return
			}
			if len(ev.data) > len(in) || len(ev.id) > maxEventIDBytes || strings.ContainsRune(ev.id, 0) {
				t.Fatalf("event %q (id %q) from %d bytes of input", ev.data, ev.id, len(in))
			}
		}
		t.Fatal("more events than input bytes")
	})
}
