package async_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/async"
)

func TestEventRoundTrip(t *testing.T) {
	for _, e := range []async.Event{
		{Kind: async.EventSubmitted, TaskID: "t1", TaskType: "echo"},
		{Kind: async.EventEnded, TaskID: "t2"},
		{Kind: async.EventCancel, TaskID: "t3"},
	} {
		got, err := async.DecodeEvent(e.Encode())
		if err != nil || got != e {
			t.Errorf("%+v came back as %+v, %v", e, got, err)
		}
	}
	for _, bad := range []string{"", "null", "[]", `{"kind":"ended"}`, `{"kind":"nope","task_id":"x"}`, `{"kind":1}`, `{"kind":"ended","task_id":"` + strings.Repeat("x", 2000) + `"}`} {
		if _, err := async.DecodeEvent([]byte(bad)); !errors.Is(err, async.ErrBadEvent) {
			t.Errorf("DecodeEvent(%.40q) = %v, want ErrBadEvent", bad, err)
		}
	}
}

// Events come from Redis: whatever arrives decodes or is an ErrBadEvent,
// and what decodes encodes back to itself.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"kind":"submitted","task_id":"t1","task_type":"echo"}`))
	f.Add([]byte(`{"kind":"ended","task_id":"t2"}`))
	f.Add([]byte(`{"kind":"cancel","task_id":"t3","extra":[1,2]}`))
	f.Add([]byte(`{"kind":"ended","task_id":""}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := async.DecodeEvent(b)
		if err != nil {
			if !errors.Is(err, async.ErrBadEvent) {
				t.Fatalf("error %v is not an ErrBadEvent", err)
			}
			return
		}
		again, err := async.DecodeEvent(e.Encode())
		if err != nil || again != e {
			t.Fatalf("%+v re-decoded as %+v, %v", e, again, err)
		}
	})
}
