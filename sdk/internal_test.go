package sdk

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

func TestBackoffDoublesJittersAndResets(t *testing.T) {
	b := newBackoff(time.Second, 5*time.Second)
	b.rand = func() float64 { return 0 }
	var low []time.Duration
	for range 5 {
		low = append(low, b.next())
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 2500 * time.Millisecond, 2500 * time.Millisecond}
	if !equalDurations(low, want) {
		t.Errorf("delays with jitter 0: %v, want %v", low, want)
	}
	b.reset()
	b.rand = func() float64 { return 0.999999999 }
	if d := b.next(); d < 999*time.Millisecond || d > time.Second {
		t.Errorf("first delay after reset with jitter ~1: %v, want ~1s", d)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		line        string
		idle, total uint64
		ok          bool
	}{
		{"cpu  10 20 30 40 50 6 7 8 9 10\n", 90, 171, true}, // guest fields not counted twice
		{"cpu 1 2 3 4", 4, 10, true},
		{"cpu0 1 2 3 4 5", 0, 0, false},
		{"cpu 1 x 3 4 5", 0, 0, false},
		{"", 0, 0, false},
	} {
		idle, total, ok := parseProcStat(tc.line)
		if idle != tc.idle || total != tc.total || ok != tc.ok {
			t.Errorf("parseProcStat(%q) = %d, %d, %v; want %d, %d, %v", tc.line, idle, total, ok, tc.idle, tc.total, tc.ok)
		}
	}
	s := newCPUSampler()
	for range 3 {
		if p := s.percent(); p < 0 || p > 100 {
			t.Errorf("cpu percent %v out of [0, 100]", p)
		}
	}
}

func TestRoundMs(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		0: 0, 499 * time.Microsecond: 0, 500 * time.Microsecond: 1, 1499 * time.Microsecond: 1, 30 * time.Millisecond: 30,
	} {
		if got := roundMs(d); got != want {
			t.Errorf("roundMs(%v) = %d, want %d", d, got, want)
		}
	}
}

// FuzzReadAssign: whatever a task_assign holds, the node either has a task
// to run, with an id and params never nil, or an error (it then refuses
// the task by name if it can, or drops it); it never panics.
func FuzzReadAssign(f *testing.F) {
	f.Add([]byte(`{"msg_id":"1","msg_type":"task_assign","payload":{"task_id":"t","params":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`{"msg_type":"task_assign","payload":{"task_id":"t","params":{"n":1e999999}}}`))
	f.Add([]byte(`{"msg_type":"task_assign","payload":{"task_id":"t","params":null,"content":7}}`))
	f.Add([]byte(`{"msg_type":"task_assign","payload":"str"}`))
	f.Add([]byte(`{"msg_type":"task_assign","payload":{"task_id":"t","stream":true,"resume_text":"so far"}}`))
	f.Add([]byte(`{"msg_type":"task_assign","payload":{"task_id":"t","resume_text":"not streamed"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := wire.ParseEnvelope(data)
		if err != nil {
			return // wire.FuzzParseEnvelope's business
		}
		for _, resume := range []bool{false, true} {
			task, err := readAssign(env, resume)
			if err != nil {
				_ = assignTaskID(env)
				continue
			}
			if task.ID == "" || task.Params == nil {
				t.Fatalf("read %q as %+v", data, task)
			}
			if task.Resume != "" && (!resume || !task.Stream) {
				t.Fatalf("read %q as a resumed task (%+v) for a node that declared resume %v", data, task, resume)
			}
		}
	})
}

func readEvents(t *testing.T, in string) ([]string, error) {
	t.Helper()
	r := newSSEReader(strings.NewReader(in))
	var out []string
	for {
		data, err := r.next()
		if err != nil {
			return out, err
		}
		out = append(out, string(data))
	}
}

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"data: {\"delta\":\"a\"}\n\ndata: {\"done\":true}\n\n", []string{`{"delta":"a"}`, `{"done":true}`}},
		{"data:x\r\n\r\n", []string{"x"}},
		{": keep-alive\n\nevent: message\nid: 3\ndata: a\ndata: b\n\n", []string{"a\nb"}},
		{"data: cut short", []string{"cut short"}},
		{"\n\n\n", nil},
		{"", nil},
	} {
		got, err := readEvents(t, tc.in)
		if !errors.Is(err, io.EOF) || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("events of %q = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	long := "data: " + strings.Repeat("x", 200<<10) + "\n\n" // longer than the reader's buffer
	if got, err := readEvents(t, long); len(got) != 1 || len(got[0]) != 200<<10 || !errors.Is(err, io.EOF) {
		t.Errorf("long event: %d events, %v", len(got), err)
	}
}

func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"delta\":\"a\"}\n\ndata: x\r\n\r\n: c\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newSSEReader(bytes.NewReader(in))
		for range len(in) + 1 {
			data, err := r.next()
			if err != nil {
				return
			}
			if len(data) > len(in) {
				t.Fatalf("event of %d bytes from %d bytes of input", len(data), len(in))
			}
		}
		t.Fatal("more events than input bytes")
	})
}
