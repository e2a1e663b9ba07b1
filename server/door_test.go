package server

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
)

// HEAD is answered wherever GET is, with GET's status
// and headers and no body; it stays 405 where GET would be.
func TestHEADOnGETRoutes(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	for _, c := range []struct {
		path, key string
		want      int
	}{
		{"/livez", "", http.StatusOK},
		{"/api/health", "", http.StatusOK},
		{"/api/v1/status", "", http.StatusOK},
		{"/api/v1/nodes", "", http.StatusOK},
		{"/api/v1/leaderboard", "", http.StatusOK},
		{"/v1/models", "", http.StatusOK},
		{"/api/v1/account", key, http.StatusOK},
		{"/api/v1/account", "", http.StatusUnauthorized},
		{"/api/v1/request", key, http.StatusMethodNotAllowed},
		{"/nowhere", "", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(http.MethodHead, ta.url+c.path, nil)
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || len(body) != 0 {
			t.Errorf("HEAD %s: HTTP %d with %d body bytes; want %d and none", c.path, resp.StatusCode, len(body), c.want)
		}
	}
	// The node socket is not upgraded by a HEAD and costs no handshake.
	req, _ := http.NewRequest(http.MethodHead, ta.url+"/ws/node", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("HEAD /ws/node: HTTP %d, want 405", resp.StatusCode)
	}
}

// The node handshake's 403 carries the rate-limit headers every other
// limited route sends, and the accepted upgrades carry them too.
func TestHandshakeLimitHeaders(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.HandshakeRate = 2 })
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, resp, err := websocket.Dial(ctx, ta.wsURL, nil)
		cancel()
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		_ = c.CloseNow()
		if resp.Header.Get("X-RateLimit-Limit") != "2" || resp.Header.Get("X-RateLimit-Remaining") != []string{"1", "0"}[i] {
			t.Errorf("upgrade %d: headers %v", i, resp.Header)
		}
	}
	_, resp, err := nodetest.Dial(t, ta.wsURL)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("third dial in a minute: %v, %v; want HTTP 403", resp, err)
	}
	h := resp.Header
	if h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != "0" || h.Get("X-RateLimit-Reset") == "" || h.Get("Retry-After") == "" {
		t.Fatalf("403 headers %v", h)
	}
}
