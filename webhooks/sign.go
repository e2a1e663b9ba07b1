package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// The headers of a delivery (docs/PROTOCOL.md, "Webhooks").
const (
	HeaderSignature = "Switchyard-Signature"
	HeaderEventID   = "Switchyard-Event-Id"
	HeaderAttempt   = "Switchyard-Delivery-Attempt"
)

// SecretPrefix starts every webhook secret.
const SecretPrefix = "whsec_"

// NewSecret returns a fresh signing secret: the prefix and 32 random bytes
// in hex. The whole string is the HMAC key.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return SecretPrefix + hex.EncodeToString(b)
}

// Signature is the Switchyard-Signature value of body signed at unix time
// ts: "t=<ts>,v1=<hex HMAC-SHA256(secret, "<ts>.<body>")>".
func Signature(secret string, ts int64, body []byte) string {
	t := strconv.FormatInt(ts, 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(t))
	m.Write([]byte("."))
	m.Write(body)
	return "t=" + t + ",v1=" + hex.EncodeToString(m.Sum(nil))
}
