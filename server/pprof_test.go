package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func httpGet(t *testing.T, url string) (int, string, error) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestPprofServesUntilContextEnds(t *testing.T) {
	p, err := listenPprof("127.0.0.1:0", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	base := "http://" + p.Addr().String()
	code, body, err := httpGet(t, base+"/debug/pprof/")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("GET /debug/pprof/ = %d, %v; body %.200q", code, err, body)
	}
	if code, body, err := httpGet(t, base+"/debug/pprof/goroutine?debug=1"); err != nil || code != http.StatusOK || !strings.Contains(body, "pprofServer") {
		t.Errorf("GET /debug/pprof/goroutine = %d, %v; want this process's goroutines (pprofServer.Run's among them)", code, err)
	}
	if code, _, _ := httpGet(t, base+"/api/v1/status"); code != http.StatusNotFound {
		t.Errorf("the profiling listener answers /api/v1/status with %d, want 404: it serves profiles only", code)
	}

	cancel()
	if err := <-done; err != nil { // returns only once the server has stopped
		t.Errorf("Run = %v after its context ended, want nil", err)
	}
	if _, _, err := httpGet(t, base+"/debug/pprof/"); err == nil {
		t.Error("the profiling endpoint still answers after its context ended")
	}
}

// Bound but never served (New failed after binding it): Close releases
// the address.
func TestPprofCloseReleasesUnserved(t *testing.T) {
	p, err := listenPprof("127.0.0.1:0", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := p.Addr().String()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := listenPprof(addr, testLogger(t))
	if err != nil {
		t.Fatalf("the address is still taken after Close: %v", err)
	}
	_ = again.Close()
}

func TestPprofUnsetBindsNothing(t *testing.T) {
	if p, err := listenPprof("", testLogger(t)); p != nil || err != nil {
		t.Errorf("listenPprof(\"\") = %v, %v; want nothing bound", p, err)
	}
}

func TestPprofBindErrorFailsBoot(t *testing.T) {
	ta := startApp(t, nil)
	_, err := New(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: testLogger(t), PprofListen: ta.Addr()})
	if err == nil || !strings.Contains(err.Error(), "--pprof-listen") {
		t.Errorf("New with --pprof-listen on a taken port = %v, want a refusal naming --pprof-listen", err)
	}
}

// syncBuffer is a log sink the test can read while the app writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestPprofEndpointOfApp(t *testing.T) {
	var logs syncBuffer
	ta := startApp(t, func(c *Config) {
		c.PprofListen = "127.0.0.1:0"
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	var pprofAddr string
	for line := range strings.Lines(logs.String()) {
		var rec struct {
			Msg       string `json:"msg"`
			PprofAddr string `json:"pprof_addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "profiling endpoint is serving" {
			pprofAddr = rec.PprofAddr
		}
	}
	if pprofAddr == "" {
		t.Fatalf("New logged no profiling address:\n%s", logs.String())
	}
	if code, _, err := httpGet(t, "http://"+pprofAddr+"/debug/pprof/"); err != nil || code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ on --pprof-listen = %d, %v; want 200", code, err)
	}
	// The API's own listener never serves profiles.
	if code, _, err := httpGet(t, ta.url+"/debug/pprof/"); err != nil || code == http.StatusOK {
		t.Errorf("GET /debug/pprof/ on the API = %d, %v; want no profile there", code, err)
	}
	ta.stop()
	if _, _, err := httpGet(t, "http://"+pprofAddr+"/debug/pprof/"); err == nil {
		t.Error("the profiling endpoint still answers after the instance stopped")
	}
}

func TestPprofOffByDefault(t *testing.T) {
	var logs syncBuffer
	ta := startApp(t, func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	if strings.Contains(logs.String(), "profiling endpoint") {
		t.Errorf("an instance without --pprof-listen started a profiling endpoint:\n%s", logs.String())
	}
	if code, _, err := httpGet(t, ta.url+"/debug/pprof/"); err != nil || code == http.StatusOK {
		t.Errorf("GET /debug/pprof/ on the API = %d, %v; want no profile there", code, err)
	}
}
