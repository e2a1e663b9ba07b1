package server

import (
	"errors"
	"testing"
	"time"
)

// FuzzParseAsyncExtras: POST /api/v1/tasks's own fields, from any bytes,
// give extras or an errInvalidBody, never a panic; an accepted ttl lies
// within the documented 1 s–168 h.
func FuzzParseAsyncExtras(f *testing.F) {
	for _, s := range []string{
		`{"task_type":"echo","content":"x"}`,
		`{"task_type":"echo","content":"x","ttl":"48h","webhook_url":"https://example.com/h"}`,
		`{"ttl":"1s"}`, `{"ttl":"168h0m1s"}`, `{"ttl":3600}`, `{"ttl":"-5m"}`, `{"ttl":null}`,
		`{"webhook_url":7}`, `{"webhook_url":""}`, `[]`, `{`, `null`, `{"ttl":"9999999999h"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := parseAsyncExtras(data)
		if err != nil {
			if !errors.Is(err, errInvalidBody) {
				t.Fatalf("error of the wrong kind: %v", err)
			}
			return
		}
		if x.TTL < time.Second || x.TTL > asyncMaxTTL {
			t.Fatalf("ttl %v accepted", x.TTL)
		}
	})
}
