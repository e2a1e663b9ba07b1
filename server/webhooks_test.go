package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
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

// An async task with a webhook_url: when it ends, its final JSON is POSTed
// there, signed with the account's secret; a receiver that answers 500
// twice gets it on the third try (the dispatcher's real backoff: 1 s, then
// 2 s), with the same event id each time, and the task's view as the body.
func TestAsyncTaskWebhookDelivered(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.WebhookAllowPrivate = true })
	key := ta.account(t, "hooked", "")
	var secret struct{ Secret string }
	if code, _ := ta.call(t, http.MethodPost, "/api/v1/webhook-secret", key, nil, &secret); code != http.StatusOK {
		t.Fatalf("rotate: %d", code)
	}
	type delivery struct {
		h    http.Header
		body []byte
	}
	got := make(chan delivery, 8)
	var answers = []int{500, 500, 200}
	var n int
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		code := http.StatusOK
		if n < len(answers) {
			code = answers[n]
		}
		n++ // the dispatcher sends one attempt at a time
		w.WriteHeader(code)
		got <- delivery{r.Header.Clone(), b}
	}))
	defer rcv.Close()

	node := connectNode(t, ta.wsURL, reg(key, "n1", "echo"))
	id := ta.submit(t, key, map[string]any{"task_type": "echo", "content": "hi", "webhook_url": rcv.URL + "/hook"})
	node.Result(node.Expect("task_assign").TaskID(), "completed", "hello back")

	var first delivery
	for attempt := 1; attempt <= 3; attempt++ {
		d := waitFor(t, got, 15*time.Second)
		if attempt == 1 {
			first = d
		}
		if err := sdk.VerifyWebhook(secret.Secret, d.h, d.body, time.Minute); err != nil {
			t.Fatalf("attempt %d: signature: %v", attempt, err)
		}
		if ev := d.h.Get("Switchyard-Event-Id"); ev == "" || ev != first.h.Get("Switchyard-Event-Id") {
			t.Fatalf("attempt %d: event id %q, the first's %q", attempt, ev, first.h.Get("Switchyard-Event-Id"))
		}
		if a := d.h.Get("Switchyard-Delivery-Attempt"); a != fmt.Sprint(attempt) {
			t.Fatalf("attempt %d: Switchyard-Delivery-Attempt %q", attempt, a)
		}
		var v asyncView
		if err := json.Unmarshal(d.body, &v); err != nil || v.TaskID != id || v.Status != "completed" || v.Result == nil || *v.Result != "hello back" {
			t.Fatalf("attempt %d: body %s (%v), want task %s completed", attempt, d.body, err, id)
		}
	}
	select { // delivered: no fourth attempt
	case d := <-got:
		t.Fatalf("a fourth attempt after a 200: %s", d.body)
	case <-time.After(2500 * time.Millisecond):
	}
}
