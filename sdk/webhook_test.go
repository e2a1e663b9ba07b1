package sdk

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sign is the server's signature, written again from PROTOCOL.md so that
// the verifier is checked against the documented rule, not its own code.
func sign(secret string, ts int64, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(ts, 10) + "." + body))
	return hex.EncodeToString(m.Sum(nil))
}

func TestVerifyWebhook(t *testing.T) {
	const secret, body = "whsec_abc", `{"task_id":"t1","status":"completed"}`
	now := time.Unix(1_700_000_000, 0)
	ts := now.Unix()
	good := sign(secret, ts, body)
	other := sign("whsec_old", ts, body)
	tsStr := strconv.FormatInt(ts, 10)
	for _, tc := range []struct {
		name, header, body string
		tolerance          time.Duration
		at                 time.Time
		ok                 bool
	}{
		{"valid", "t=" + tsStr + ",v1=" + good, body, 0, now, true},
		{"spaces", "t=" + tsStr + ", v1=" + good, body, 0, now, true},
		{"rotation: second value matches", "t=" + tsStr + ",v1=" + other + ",v1=" + good, body, 0, now, true},
		{"unknown scheme ignored", "t=" + tsStr + ",v0=zz,v1=" + good, body, 0, now, true},
		{"within tolerance", "t=" + tsStr + ",v1=" + good, body, time.Minute, now.Add(59 * time.Second), true},
		{"too old", "t=" + tsStr + ",v1=" + good, body, time.Minute, now.Add(61 * time.Second), false},
		{"from the future", "t=" + tsStr + ",v1=" + good, body, time.Minute, now.Add(-61 * time.Second), false},
		{"default tolerance is 5 min", "t=" + tsStr + ",v1=" + good, body, 0, now.Add(6 * time.Minute), false},
		{"body changed", "t=" + tsStr + ",v1=" + good, body + " ", 0, now, false},
		{"timestamp changed", "t=" + strconv.FormatInt(ts+1, 10) + ",v1=" + good, body, 0, now, false},
		{"wrong secret only", "t=" + tsStr + ",v1=" + other, body, 0, now, false},
		{"not hex", "t=" + tsStr + ",v1=" + strings.Repeat("z", 64), body, 0, now, false},
		{"truncated", "t=" + tsStr + ",v1=" + good[:62], body, 0, now, false},
		{"no header", "", body, 0, now, false},
		{"no timestamp", "v1=" + good, body, 0, now, false},
		{"no v1", "t=" + tsStr, body, 0, now, false},
		{"two timestamps", "t=" + tsStr + ",t=" + tsStr + ",v1=" + good, body, 0, now, false},
		{"negative timestamp", "t=-1,v1=" + good, body, 0, now, false},
		{"malformed part", "t=" + tsStr + ",v1", body, 0, now, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := verifyWebhookAt(secret, tc.header, []byte(tc.body), tc.tolerance, tc.at)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrWebhookSignature) {
				t.Fatalf("got %v, want ErrWebhookSignature", err)
			}
		})
	}
	if err := verifyWebhookAt("", "t="+tsStr+",v1="+sign("", ts, body), []byte(body), 0, now); err == nil {
		t.Error("an empty secret verified")
	}
}

// The exported function reads the header and the real clock.
func TestVerifyWebhookHeader(t *testing.T) {
	const secret, body = "whsec_x", `{}`
	ts := time.Now().Unix()
	h := http.Header{}
	h.Set(WebhookSignatureHeader, "t="+strconv.FormatInt(ts, 10)+",v1="+sign(secret, ts, body))
	if err := VerifyWebhook(secret, h, []byte(body), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := VerifyWebhook("whsec_y", h, []byte(body), time.Minute); err == nil {
		t.Fatal("verified under another secret")
	}
}

// The signature header comes from the network: no input may panic, and
// whatever verifies must really be signed.
func FuzzVerifyWebhook(f *testing.F) {
	const secret = "whsec_fuzz"
	now := time.Unix(1_700_000_000, 0)
	f.Add("t=1700000000,v1="+sign(secret, 1_700_000_000, "{}"), []byte("{}"))
	f.Add("t=1700000000,v1=00,v1="+sign(secret, 1_700_000_000, "{}"), []byte("{}"))
	f.Add("t=,v1=", []byte(""))
	f.Add("t=99999999999999999999,v1=ab", []byte("x"))
	f.Add(",,,=,t==,v1==", []byte("x"))
	f.Add(" t=1700000000 , v1=zz ,x", []byte("{}"))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := verifyWebhookAt(secret, header, body, time.Minute, now)
		if err != nil {
			if !errors.Is(err, ErrWebhookSignature) {
				t.Fatalf("error %v does not wrap ErrWebhookSignature", err)
			}
			return
		}
		ts, sigs, perr := parseSignatureHeader(header)
		if perr != nil {
			t.Fatalf("verified a header that does not parse: %v", perr)
		}
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(ts + "."))
		m.Write(body)
		want := hex.EncodeToString(m.Sum(nil))
		found := false
		for _, s := range sigs {
			if strings.EqualFold(s, want) {
				found = true
			}
		}
		if !found {
			t.Fatalf("verified %q with no matching signature", header)
		}
	})
}
