package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"switchyard/sdk"
)

// POST /api/v1/webhook-secret rotates the account's secret and shows it
// once; deliveries from the App's dispatcher sign with the newest one.
func TestWebhookSecretRotation(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.WebhookAllowPrivate = true })
	key := ta.account(t, "hooked", "")

	if code, _, _, err := ta.do(http.MethodPost, "/api/v1/webhook-secret", "", nil); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("without a key: %d, %v", code, err)
	}
	var first, second struct{ Secret string }
	code, hdr := ta.call(t, http.MethodPost, "/api/v1/webhook-secret", key, nil, &first)
	if code != http.StatusOK || !strings.HasPrefix(first.Secret, "whsec_") || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("rotate: %d %+v %v", code, first, hdr)
	}
	if code, _ = ta.call(t, http.MethodPost, "/api/v1/webhook-secret", key, nil, &second); code != http.StatusOK || second.Secret == first.Secret {
		t.Fatalf("second rotate: %d %+v", code, second)
	}
	var acct struct {
		AccountID string `json:"account_id"`
	}
	if code, _ := ta.call(t, http.MethodGet, "/api/v1/account", key, nil, &acct); code != http.StatusOK {
		t.Fatalf("account: %d", code)
	}
	_, body, _, _ := ta.do(http.MethodGet, "/api/v1/account", key, nil)
	if strings.Contains(string(body), second.Secret) {
		t.Fatal("GET /api/v1/account shows the webhook secret")
	}

	got := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	defer rcv.Close()
	if err := ta.Webhooks().Enqueue(t.Context(), acct.AccountID, rcv.URL, "evt-srv", []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, got, 10*time.Second)
	b := <-bodies
	if err := sdk.VerifyWebhook(second.Secret, r.Header, b, time.Minute); err != nil {
		t.Errorf("the newest secret: %v", err)
	}
	if err := sdk.VerifyWebhook(first.Secret, r.Header, b, time.Minute); err == nil {
		t.Error("the rotated-out secret still verifies")
	}
}

// Without --webhook-allow-private the App's dispatcher refuses loopback.
func TestWebhookPrivateRefusedByDefault(t *testing.T) {
	ta := startApp(t, nil)
	if err := ta.Webhooks().CheckURL(t.Context(), "http://127.0.0.1:9/hook"); err == nil || !strings.Contains(err.Error(), "--webhook-allow-private") {
		t.Fatalf("CheckURL of loopback: %v", err)
	}
}
