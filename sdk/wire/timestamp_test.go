package wire

import (
	"testing"
	"time"
)

// FuzzAppendTimestamp requires AppendTimestamp's bytes to be time.Time's
// AppendFormat of the envelope's layout for any instant, in any zone,
// appended to what is already there.
func FuzzAppendTimestamp(f *testing.F) {
	for _, s := range []struct {
		sec, nsec int64
		off       int
	}{
		{1764988800, 123456789, 0}, {0, 0, 0},
		{-62135596800, 0, 0},         // 0001-01-01
		{253402300799, 999999999, 0}, // 9999-12-31T23:59:59.999999999
		{253402300800, 0, 0},         // 10000-01-01: Format's own width
		{-62167219200 - 86400, 0, 0}, // year -1: Format's own sign
		{1764988800, 1000, 3600}, {1764988800, 999, -19800},
	} {
		f.Add(s.sec, s.nsec, s.off)
	}
	f.Fuzz(func(t *testing.T, sec, nsec int64, off int) {
		at := time.Unix(sec, nsec).In(time.FixedZone("z", off%(18*3600)))
		want := "x" + at.UTC().Format(timestampLayout)
		if got := string(AppendTimestamp([]byte("x"), at)); got != want {
			t.Fatalf("%v: %q, want %q", at, got, want)
		}
	})
}

// BenchmarkAppendTimestamp is AppendTimestamp against AppendFormat.
func BenchmarkAppendTimestamp(b *testing.B) {
	at := time.Date(2026, 12, 6, 17, 4, 5, 123456789, time.UTC)
	buf := make([]byte, 0, 64)
	b.Run("AppendTimestamp", func(b *testing.B) {
		for b.Loop() {
			buf = AppendTimestamp(buf[:0], at)
		}
	})
	b.Run("AppendFormat", func(b *testing.B) {
		for b.Loop() {
			buf = at.UTC().AppendFormat(buf[:0], timestampLayout)
		}
	})
}
