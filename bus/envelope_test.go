package bus_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

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

// randomEnvelope sets each field or leaves it empty, at random, with values
// of every width (a number's encoding depends on its size).
func randomEnvelope(r *rand.Rand) *bus.Envelope {
	str := func() string {
		switch n := r.IntN(16); {
		case n < 5:
			return ""
		case n < 10:
			return "x"
		case n < 15:
			return strings.Repeat("é", r.IntN(200)) // fixstr, str8, str16
		default:
			return strings.Repeat("z", 65536) // str32
		}
	}
	u64 := func() uint64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return r.Uint64() >> r.IntN(64)
	}
	i64 := func() int64 { return int64(u64()) * int64(1-2*r.IntN(2)) }
	e := &bus.Envelope{
		Kind: bus.Kind(r.IntN(256)), From: str(), TaskID: str(), NodeID: str(), Gen: u64(),
		TaskType: str(), Content: str(), Stream: r.IntN(2) == 0, Deadline: i64(), ReplyTo: str(),
		Account: str(), KeyID: str(), ResumeText: str(), Seq: uint32(u64()), Delta: str(), Reason: str(),
	}
	if p := str(); p != "" {
		e.Params = []byte(p)
	}
	if r.IntN(2) == 0 {
		e.Result = &bus.Result{
			Status: str(), Text: str(), ProcessingMs: i64(), HasUsage: r.IntN(2) == 0, PromptTokens: i64(),
			OutputTokens: i64(), Chunks: uint32(u64()), Code: str(), Message: str(),
		}
	}
	return e
}

// An instance of an earlier release encodes and decodes envelopes with
// msgpack.Marshal and Unmarshal: Encode must write exactly their bytes, so
// that both releases read each other's envelopes during a rolling upgrade.
func TestEncodeIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	envs := sampleEnvelopes()
	for range 500 {
		envs = append(envs, randomEnvelope(r))
	}
	// Every field of both structs is set in some envelope: a field added
	// to them and not to Encode and Decode fails here, once it is added
	// to randomEnvelope (which this checks too).
	set := map[string]bool{}
	for _, e := range envs {
		for _, v := range []reflect.Value{reflect.ValueOf(*e), reflect.ValueOf(e.Result)} {
			if v.Kind() == reflect.Pointer {
				if v.IsNil() {
					continue
				}
				v = v.Elem()
			}
			for i := range v.NumField() {
				if !v.Field(i).IsZero() {
					set[v.Type().Name()+"."+v.Type().Field(i).Name] = true
				}
			}
		}
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[bus.Envelope](), reflect.TypeFor[bus.Result]()} {
		for i := range typ.NumField() {
			if name := typ.Name() + "." + typ.Field(i).Name; !set[name] {
				t.Errorf("no envelope sets %s: randomEnvelope must", name)
			}
		}
	}
	for _, e := range envs {
		got, err := bus.Encode(e)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		want, err := msgpack.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Encode(%+v)\n= %x\nmsgpack.Marshal gives\n  %x", e, got, want)
		}
		if e.Validate() != nil {
			continue
		}
		back, err := bus.Decode(want)
		if err != nil {
			t.Fatalf("Decode of msgpack.Marshal(%+v): %v", e, err)
		}
		if !reflect.DeepEqual(back, e) {
			t.Fatalf("Decode gave %+v, want %+v", back, e)
		}
	}
}

// A field this release does not know (an envelope from a later one) is
// skipped, whatever its type, as msgpack.Unmarshal skips it.
func TestDecodeSkipsUnknownFields(t *testing.T) {
	type later struct {
		Kind    bus.Kind       `msgpack:"k"`
		New     map[string]any `msgpack:"zz"`
		TaskID  string         `msgpack:"t"`
		Longer  []int          `msgpack:"a_key_longer_than_eight_bytes"`
		Result  map[string]any `msgpack:"res"`
		Reason  string         `msgpack:"rs"`
		Trailer float64        `msgpack:"fl"`
		When    time.Time      `msgpack:"tm"` // an ext
	}
	b, err := msgpack.Marshal(later{
		Kind: bus.KindResult, New: map[string]any{"x": []any{1, "y", nil}}, TaskID: "t1", Longer: []int{1, 2},
		Result: map[string]any{"st": "completed", "future": map[string]any{"a": 1}, "tx": "done"}, Reason: "r", Trailer: 1.5,
		When: time.Unix(1700000000, 5),
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := bus.Decode(b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := &bus.Envelope{Kind: bus.KindResult, TaskID: "t1", Result: &bus.Result{Status: "completed", Text: "done"}, Reason: "r"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode gave %+v, want %+v", got, want)
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
	for _, junk := range [][]byte{
		nil, {0xc1}, []byte("not msgpack"), {0x92, 0x01},
		{0x81, 0xa1, 'k', 0xcd, 0x01, 0x00},                              // kind 256
		{0x82, 0xa1, 'k', 0x02, 0xa1, 'q', 0xcf, 0, 0, 0, 1, 0, 0, 0, 0}, // seq 2^32
		{0x82, 0xa1, 'k', 0x03, 0xa1, 't'},                               // cut short
	} {
		if _, err := bus.Decode(junk); !errors.Is(err, bus.ErrMalformed) {
			t.Errorf("Decode(%q) = %v; want ErrMalformed", junk, err)
		}
	}
}

// A length on the wire is the sender's word: a field claiming more bytes
// than the envelope holds is refused before they are allocated. (msgpack's
// own DecodeBytes, which Decode used through msgpack.Unmarshal, allocated
// the 4 GiB a bin32 header claims, and its Skip a megabyte or two for each
// string, bin or ext it stepped over: the fuzzer's workers died of it.)
func TestDecodeAllocatesNoClaimedLength(t *testing.T) {
	head := []byte{0x83, 0xa1, 'k', 0x03, 0xa1, 't', 0xa1, 'x'} // kind result, task "x", and one more field:
	nested := append(append([]byte{}, head...), 0xa2, 'z', 'z')
	for range 40 {
		nested = append(nested, 0x91) // an array of one, 40 deep
	}
	for _, field := range [][]byte{
		{0xa1, 'p', 0xc6, 0xff, 0xff, 0xff, 0xff},           // params: bin32, 4 GiB
		{0xa1, 'p', 0xdb, 0x7f, 0xff, 0xff, 0xff},           // params: str32, 2 GiB
		{0xa1, 'c', 0xdb, 0x7f, 0xff, 0xff, 0xff},           // content: str32
		{0xdb, 0x7f, 0xff, 0xff, 0xff},                      // a key: str32
		{0xa2, 'z', 'z', 0xc6, 0x7f, 0xff, 0xff, 0xff},      // an unknown field: bin32
		{0xa2, 'z', 'z', 0xdb, 0x00, 0x20, 0x00, 0x00},      // an unknown field: str32, 2 MiB
		{0xa2, 'z', 'z', 0xc9, 0x00, 0x20, 0x00, 0x00, 1},   // an unknown field: ext32, 2 MiB
		{0xa2, 'z', 'z', 0xdd, 0xff, 0xff, 0xff, 0xff},      // an unknown field: array32, 4 billion
		{0xa2, 'z', 'z', 0xdf, 0xff, 0xff, 0xff, 0xff},      // an unknown field: map32, 4 billion
		{0xa3, 'r', 'e', 's', 0xdf, 0xff, 0xff, 0xff, 0xff}, // result: map32, 4 billion
		nested[len(head):],
	} {
		b := append(append([]byte{}, head...), field...)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := bus.Decode(b)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, bus.ErrMalformed) {
			t.Errorf("Decode(%x) = %v; want ErrMalformed", b, err)
		}
		// TotalAlloc is the process's: 512 KiB leaves room for another
		// goroutine's allocations, and is half what msgpack's decoder
		// allocated for the least of these (1 MiB).
		if n := after.TotalAlloc - before.TotalAlloc; n > 512<<10 {
			t.Errorf("Decode(%x) allocated %d bytes", b, n)
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
		// And an instance of an earlier release, decoding with
		// msgpack.Unmarshal, reads the same envelope.
		var old bus.Envelope
		if err := msgpack.Unmarshal(again, &old); err != nil || !reflect.DeepEqual(&old, e) {
			t.Fatalf("msgpack.Unmarshal of the re-encoded envelope: %+v, %v; want %+v", old, err, e)
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
