package bus_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/switchyard-dev/switchyard/bus"
)

func sampleEnvelopes() []*bus.Envelope {
	return []*bus.Envelope{
		{Kind: bus.KindAssign, From: "a", TaskID: "t1", NodeID: "n1", Gen: 3, TaskType: "echo", Content: "hi",
			Params: []byte(`{"x":1}`), Stream: true, Deadline: 1700000000000, ReplyTo: "a", Account: "acct", KeyID: "key"},
		{Kind: bus.KindChunk, From: "b", TaskID: "t1", NodeID: "n1", Gen: 3, Seq: 9, Delta: "δ"},
		{Kind: bus.KindResult, From: "b", TaskID: "t1", NodeID: "n1", Gen: 3, Result: &bus.Result{
			Status: "completed", Text: "done", ProcessingMs: 12, HasUsage: true, PromptTokens: 1, OutputTokens: 2, Chunks: 9}},
		{Kind: bus.KindResult, From: "b", TaskID: "t2", Result: &bus.Result{Code: "result_too_large", Message: "big"}},
		{Kind: bus.KindNodeGone, From: "b", TaskID: "t1", NodeID: "n1", Gen: 3, Reason: "node disconnected"},
		{Kind: bus.KindReplace, From: "c", NodeID: "n1", Gen: 4},
		{Kind: bus.KindCancel, From: "a", TaskID: "t1", NodeID: "n1", Gen: 3, Reason: "client gone", ReplyTo: "a"},
		{Kind: bus.KindControl, From: "b", NodeID: "n1", Reason: "pause", Content: "new driver"},
	}
}

func TestCodecRoundTrip(t *testing.T) {
	for _, e := range sampleEnvelopes() {
		b, err := bus.Encode(e)
		if err != nil {
			t.Fatalf("Encode(%s): %v", e.Kind, err)
		}
		got, err := bus.Decode(b)
		if err != nil {
			t.Fatalf("Decode(%s): %v", e.Kind, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("%s: round trip gave %+v, want %+v", e.Kind, got, e)
		}
	}
}

func TestDecodeRefusesWhatCannotBeActedOn(t *testing.T) {
	bad := []*bus.Envelope{
		{Kind: 0},
		{Kind: 99, TaskID: "t"},
		{Kind: bus.KindAssign, TaskID: "t", NodeID: "n"}, // no reply_to
		{Kind: bus.KindChunk},
		{Kind: bus.KindResult, TaskID: "t"}, // no result
		{Kind: bus.KindReplace},
		{Kind: bus.KindControl, NodeID: "n"},     // no action
		{Kind: bus.KindControl, Reason: "pause"}, // no node
	}
	for _, e := range bad {
		b, err := bus.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bus.Decode(b); !errors.Is(err, bus.ErrMalformed) {
			t.Errorf("Decode(%+v) = %v; want ErrMalformed", e, err)
		}
	}
	for _, junk := range [][]byte{nil, {0xc1}, []byte("not msgpack"), {0x92, 0x01}} {
		if _, err := bus.Decode(junk); !errors.Is(err, bus.ErrMalformed) {
			t.Errorf("Decode(%q) = %v; want ErrMalformed", junk, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, e := range sampleEnvelopes() {
		b, err := bus.Encode(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := bus.Decode(b)
		if err != nil {
			if !errors.Is(err, bus.ErrMalformed) {
				t.Fatalf("Decode error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Whatever decodes must survive a round trip unchanged.
		again, err := bus.Encode(e)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		e2, err := bus.Decode(again)
		if err != nil {
			t.Fatalf("decode of re-encoded envelope: %v", err)
		}
		if !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip changed %+v into %+v", e, e2)
		}
	})
}

func BenchmarkCodec(b *testing.B) {
	e := sampleEnvelopes()[0]
	b.ReportAllocs()
	for b.Loop() {
		buf, err := bus.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bus.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}
