package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The health check exits 0 (nil) only on 200 from the path it checks, and
// says what it saw either way.
func TestHealthcheck(t *testing.T) {
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/livez":
			w.Write([]byte("ok\n"))
		case r.URL.Path == "/api/health" && ready:
			w.Write([]byte(`{"status":"ok"}`))
		case r.URL.Path == "/api/health":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"not_ready","reason":"draining"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	out := mustCLI(t, "healthcheck", "--url", srv.URL+"/")
	if want := srv.URL + "/api/health: ok\n"; out != want {
		t.Errorf("ready: printed %q, want %q", out, want)
	}
	ready = false
	_, _, err := cli(t, "healthcheck", "--url", srv.URL)
	if err == nil || !strings.Contains(err.Error(), "HTTP 503") || !strings.Contains(err.Error(), "draining") {
		t.Errorf("not ready: err = %v, want HTTP 503 with the reason", err)
	}
	if out := mustCLI(t, "healthcheck", "--url", srv.URL, "--live"); !strings.Contains(out, "/livez: ok") {
		t.Errorf("--live: printed %q", out)
	}
	srv.Close()
	if _, _, err := cli(t, "healthcheck", "--url", srv.URL, "--timeout", "1s"); err == nil {
		t.Error("no server: err = nil")
	}
}

func TestHealthcheckURL(t *testing.T) {
	for listen, want := range map[string]string{
		"":             "http://127.0.0.1:8800",
		":9000":        "http://127.0.0.1:9000",
		"0.0.0.0:8801": "http://127.0.0.1:8801",
		"nonsense":     "http://127.0.0.1:8800",
	} {
		if got := healthcheckURL(listen); got != want {
			t.Errorf("healthcheckURL(%q) = %q, want %q", listen, got, want)
		}
	}
}
