package tasks

import (
	"encoding/json"
	"testing"
	"time"
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

// Only a plain task of a hedged type, bound to no session, node set or
// split, is hedged.
func TestHedgeDelayOnlyForPlainTasks(t *testing.T) {
	d := &dispatcher{cfg: Config{Hedge: map[string]time.Duration{"chat": time.Second}}}
	for _, c := range []struct {
		req  Request
		want time.Duration
	}{
		{Request{TaskType: "chat"}, time.Second},
		{Request{TaskType: "embed"}, 0},
		{Request{TaskType: "chat", Stream: true}, 0},
		{Request{TaskType: "chat", LocalOnly: true}, 0},
		{Request{TaskType: "chat", Session: "s"}, 0},
		{Request{TaskType: "chat", subtask: true}, 0},
	} {
		if got := d.hedgeDelay(&c.req); got != c.want {
			t.Errorf("hedgeDelay(%+v) = %v, want %v", c.req, got, c.want)
		}
	}
}

// A stream's kept text is bounded by the result cap per stream and the
// instance's budget over all streams; one that outgrows either is dropped
// (its share given back) and cannot be resumed, the others are untouched.
// A stream with no resume node among its candidates keeps nothing.
func TestKeptStreamTextIsBounded(t *testing.T) {
	d := &dispatcher{cfg: Config{ResultMaxBytes: 10, StreamBufferBytes: 15, TaskRetries: 1}}
	stream := func(resumers bool) *run {
		return &run{d: d, req: &Request{Stream: true}, resumers: resumers}
	}
	a, b, c, none := stream(true), stream(true), stream(true), stream(false)
	none.keep("ignored")
	a.keep("12345678")
	b.keep("abcdefg")
	if a.text.String() != "12345678" || b.text.String() != "abcdefg" || none.text.Len() != 0 || d.keptText.Load() != 15 {
		t.Fatalf("kept %q, %q, %q; budget used %d", a.text.String(), b.text.String(), none.text.String(), d.keptText.Load())
	}
	c.keep("x")   // over the instance's budget
	a.keep("9ab") // over the stream's cap
	if !c.textCapped || !a.textCapped || a.text.Len() != 0 || b.textCapped || d.keptText.Load() != 7 {
		t.Fatalf("after going over: a capped %v (%q), c capped %v, b capped %v; budget used %d, want 7",
			a.textCapped, a.text.String(), c.textCapped, b.textCapped, d.keptText.Load())
	}
	if a.keep("z"); a.text.Len() != 0 {
		t.Fatal("a dropped stream kept more text")
	}
}
