package sdk

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrWebhookSignature is what VerifyWebhook returns (wrapped, with the
// reason) for a delivery that must not be trusted.
var ErrWebhookSignature = errors.New("webhook signature invalid")

// DefaultWebhookTolerance is how old (or how far ahead) a signature's
// timestamp may be when VerifyWebhook is given no tolerance.
const DefaultWebhookTolerance = 5 * time.Minute

// The headers switchyard sends with a webhook (docs/PROTOCOL.md, "Webhooks").
const (
	WebhookSignatureHeader = "Switchyard-Signature"
	WebhookEventIDHeader   = "Switchyard-Event-Id"
	WebhookAttemptHeader   = "Switchyard-Delivery-Attempt"
)

// maxSignatureHeader bounds the header VerifyWebhook parses, and
// maxSignatures the v1= values it tries.
const (
	maxSignatureHeader = 4096
	maxSignatures      = 8
)

// VerifyWebhook checks a webhook delivery from switchyard: header is the
// request's, body its raw bytes (read them before decoding: any change
// breaks the signature), secret the account's "whsec_…" secret. It returns
// nil if the Switchyard-Signature header ("t=<unix seconds>,v1=<hex>") holds
// an HMAC-SHA256 of "<t>.<body>" under secret and t is within tolerance of
// now (0: DefaultWebhookTolerance), else an error wrapping
// ErrWebhookSignature. The header may carry several v1= values (one
// matching is enough) and other schemes, which are ignored; the comparison
// is constant-time. A delivery can arrive more than once: de-duplicate on
// the Switchyard-Event-Id header.
func VerifyWebhook(secret string, header http.Header, body []byte, tolerance time.Duration) error {
	return verifyWebhookAt(secret, header.Get(WebhookSignatureHeader), body, tolerance, time.Now())
}

func verifyWebhookAt(secret, value string, body []byte, tolerance time.Duration, now time.Time) error {
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	if secret == "" {
		return fmt.Errorf("%w: no secret to verify with", ErrWebhookSignature)
	}
	ts, sigs, err := parseSignatureHeader(value)
	if err != nil {
		return err
	}
	t, _ := strconv.ParseInt(ts, 10, 64) // parseSignatureHeader checked it
	if age := now.Sub(time.Unix(t, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: timestamp %s is %s away from now, beyond the tolerance of %s", ErrWebhookSignature, ts, age.Round(time.Second), tolerance)
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	want := m.Sum(nil)
	ok := false
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		// Every value is compared, matched or not: no early exit to time.
		if err == nil && hmac.Equal(got, want) {
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("%w: no v1 signature matches the body under this secret", ErrWebhookSignature)
	}
	return nil
}

// parseSignatureHeader splits "t=<digits>,v1=<hex>[,v1=…][,other=…]" into
// the timestamp (as sent: it is part of what was signed) and the v1 values.
func parseSignatureHeader(v string) (ts string, v1 []string, err error) {
	if v == "" {
		return "", nil, fmt.Errorf("%w: no %s header", ErrWebhookSignature, WebhookSignatureHeader)
	}
	if len(v) > maxSignatureHeader {
		return "", nil, fmt.Errorf("%w: %s header over %d bytes", ErrWebhookSignature, WebhookSignatureHeader, maxSignatureHeader)
	}
	seenT := false
	for part := range strings.SplitSeq(v, ",") {
		k, val, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			return "", nil, fmt.Errorf("%w: malformed %s header", ErrWebhookSignature, WebhookSignatureHeader)
		}
		switch k {
		case "t":
			if seenT {
				return "", nil, fmt.Errorf("%w: more than one timestamp", ErrWebhookSignature)
			}
			if !isDigits(val) || len(val) > 18 { // fits an int64
				return "", nil, fmt.Errorf("%w: timestamp %q is not unix seconds", ErrWebhookSignature, val)
			}
			ts, seenT = val, true
		case "v1":
			if len(v1) < maxSignatures {
				v1 = append(v1, val)
			}
		}
	}
	if !seenT {
		return "", nil, fmt.Errorf("%w: no timestamp (t=)", ErrWebhookSignature)
	}
	if len(v1) == 0 {
		return "", nil, fmt.Errorf("%w: no v1 signature", ErrWebhookSignature)
	}
	return ts, v1, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
