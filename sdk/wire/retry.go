package wire

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// RetryAfterKey starts the reason of a close 1013 (CloseTryAgainLater)
// that says when to come back: "retry_after_ms=N", N a decimal count of
// milliseconds, then optionally "; " and text for people. The coordinator
// sends it when it sheds a registration because too many are in progress
// (docs/PROTOCOL.md, "Close codes"); a close 1013 without it means "back
// off as usual". GemmaNet's SDK reads only the close code, so the reason
// is free for this.
const RetryAfterKey = "retry_after_ms"

// maxCloseReason is the most bytes a close frame's reason may have
// (RFC 6455: 125 bytes of payload, 2 of them the code).
const maxCloseReason = 123

// RetryAfterReason is a close reason carrying the hint d (rounded up to a
// whole millisecond, at least 1) followed by text, cut so that the whole
// fits in a close frame; the hint itself is never cut.
func RetryAfterReason(d time.Duration, text string) string {
	ms := max((d+time.Millisecond-1)/time.Millisecond, 1)
	r := RetryAfterKey + "=" + strconv.FormatInt(int64(ms), 10)
	if text == "" {
		return r
	}
	if room := maxCloseReason - len(r) - 2; len(text) > room {
		text = text[:max(room, 0)]
		for text != "" { // end at a character's end, not inside one
			c, size := utf8.DecodeLastRuneInString(text)
			if c != utf8.RuneError || size != 1 {
				break
			}
			text = text[:len(text)-1]
		}
	}
	return r + "; " + text
}

// maxRetryAfter is the longest hint ParseRetryAfter accepts: beyond it the
// number is not a wait anyone meant (a day).
const maxRetryAfter = 24 * time.Hour

// ParseRetryAfter reads the hint of a close reason that starts with
// RetryAfterKey (RetryAfterReason). ok is false for a reason without one,
// or with a number that is not 1–86,400,000 ms; the text after the number
// must be empty or start with ';'.
func ParseRetryAfter(reason string) (d time.Duration, ok bool) {
	rest, found := strings.CutPrefix(reason, RetryAfterKey+"=")
	if !found {
		return 0, false
	}
	digits := 0
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		digits++
	}
	if digits == 0 || digits > 9 { // 9 digits hold a day in ms; more cannot be in range
		return 0, false
	}
	if tail := rest[digits:]; tail != "" && tail[0] != ';' {
		return 0, false
	}
	ms, err := strconv.ParseInt(rest[:digits], 10, 64)
	if err != nil || ms < 1 {
		return 0, false
	}
	d = time.Duration(ms) * time.Millisecond
	if d > maxRetryAfter {
		return 0, false
	}
	return d, true
}
