package server

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readBodySized reads what io.ReadAll reads, whatever length was announced and
// however the reader hands out its bytes, and an announced body within
// presizeMax costs one allocation.
func TestReadBodySized(t *testing.T) {
	for _, size := range []int{0, 1, 511, 512, 513, 4096, presizeMax, presizeMax + 1, 200 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		readers := map[string]func() io.Reader{
			"plain":    func() io.Reader { return bytes.NewReader(body) },
			"one byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(body)) },
			"data+EOF": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(body)) },
			"half":     func() io.Reader { return iotest.HalfReader(bytes.NewReader(body)) },
		}
		for name, r := range readers {
			for _, announced := range []int64{-1, 0, int64(size) / 2, int64(size), int64(size) + 7} {
				got, err := readBodySized(r(), announced)
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("size %d, %s reader, %d announced: %d bytes, %v", size, name, announced, len(got), err)
				}
			}
		}
	}
	boom := errors.New("boom")
	if _, err := readBodySized(io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)), 10); !errors.Is(err, boom) {
		t.Errorf("a failing read gave %v", err)
	}
	body := bytes.Repeat([]byte("y"), 3000)
	r := bytes.NewReader(body)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(body)
		if b, err := readBodySized(r, int64(len(body))); err != nil || len(b) != len(body) {
			t.Fatal(len(b), err)
		}
	})
	if allocs != 1 {
		t.Errorf("%v allocations for an announced body, want 1", allocs)
	}
}
