package idempotency_test

import (
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/idempotency"
)

// FuzzDecodeRecord: a record read back from Redis (another instance wrote
// it, perhaps of another version, or an operator by hand) is used only
// within the bounds, whatever its fields hold. The input is field=value
// lines.
func FuzzDecodeRecord(f *testing.F) {
	f.Add("st=done\nfp=x\ntok=t\ncode=200\nbody={}\nh:Content-Type=application/json")
	f.Add("st=run\nfp=x\ntok=t")
	f.Add("st=done\ncode=99999\nbody=")
	f.Add("st=done\ncode=200\nh:content-type=x")
	cfg := idempotency.Config{MaxAnswerBytes: 64}
	f.Fuzz(func(t *testing.T, in string) {
		h := map[string]string{}
		for line := range strings.SplitSeq(in, "\n") {
			k, v, _ := strings.Cut(line, "=")
			h[k] = v
		}
		_, _, done, a, err := idempotency.DecodeRecord(cfg, h)
		if err != nil || !done {
			return
		}
		if a.Status < 100 || a.Status > 599 || len(a.Body) > 64 || len(a.Header) > idempotency.MaxHeaders {
			t.Fatalf("decoded out of bounds: status %d, %d bytes, %d headers", a.Status, len(a.Body), len(a.Header))
		}
		for k, v := range a.Header {
			if len(k)+len(v) > idempotency.MaxHeaderBytes {
				t.Fatalf("header %q of %d bytes", k, len(k)+len(v))
			}
		}
	})
}
