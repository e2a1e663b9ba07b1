package wire

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRetryAfterReasonRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		text string
		want string
	}{
		{1500 * time.Millisecond, "busy", "retry_after_ms=1500; busy"},
		{1500*time.Millisecond + 1, "", "retry_after_ms=1501"}, // rounded up
		{0, "", "retry_after_ms=1"},                            // at least 1 ms
		{30 * time.Second, strings.Repeat("é", 100), ""},       // cut to fit, on a character boundary
	} {
		r := RetryAfterReason(tc.d, tc.text)
		if tc.want != "" && r != tc.want {
			t.Errorf("RetryAfterReason(%v, %q) = %q, want %q", tc.d, tc.text, r, tc.want)
		}
		if len(r) > 123 || !utf8.ValidString(r) {
			t.Errorf("RetryAfterReason(%v, %q) = %q: %d bytes, valid UTF-8 %v; a close reason holds 123", tc.d, tc.text, r, len(r), utf8.ValidString(r))
		}
		got, ok := ParseRetryAfter(r)
		if want := max(tc.d.Round(time.Millisecond), time.Millisecond); !ok || got < want || got > want+time.Millisecond {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want about %v", r, got, ok, want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   time.Duration
		ok     bool
	}{
		{"retry_after_ms=250", 250 * time.Millisecond, true},
		{"retry_after_ms=250; the coordinator is registering many nodes", 250 * time.Millisecond, true},
		{"retry_after_ms=250;", 250 * time.Millisecond, true},
		{"retry_after_ms=86400000", 24 * time.Hour, true},
		{"retry_after_ms=86400001", 0, false}, // over a day
		{"retry_after_ms=9999999999", 0, false},
		{"retry_after_ms=0", 0, false},
		{"retry_after_ms=-5", 0, false},
		{"retry_after_ms=", 0, false},
		{"retry_after_ms=12ms", 0, false},
		{"retry_after_ms=1.5", 0, false},
		{"retry_after_ms 250", 0, false},
		{" retry_after_ms=250", 0, false},
		{"busy; retry_after_ms=250", 0, false}, // only at the start
		{"the coordinator is registering many nodes; retry shortly", 0, false},
		{"", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.reason)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.reason, got, ok, tc.want, tc.ok)
		}
	}
}
