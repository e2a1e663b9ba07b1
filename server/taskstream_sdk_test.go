package server

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// The SDK's StreamTask through a balancer in front of two instances: it
// reads 4 chunks on A; A stops (its stream is cut as its drain begins);
// the SDK reconnects with Last-Event-ID 4, lands on B, and gets exactly
// 5..10, partly replayed and partly live, then the result.
func TestStreamTaskResumesOnAnotherInstanceThroughTheSDK(t *testing.T) {
	o := &owners{}
	a, b := startPairWith(t, "taskstreamsdk", nil, withTaskStreams(o, 0))
	acct, key := a.accountKey(t, "sdk")
	o.set("t1", acct)

	var conns atomic.Int32
	ua, _ := url.Parse(a.url)
	ub, _ := url.Parse(b.url)
	lb := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		target := ub
		if conns.Add(1) == 1 {
			target = ua // the first connection; every later one goes to B
		}
		r.SetURL(target)
	}})
	t.Cleanup(lb.Close)

	feed(t, a.streams, "t1", 1, 4)
	got := make(chan string, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := async(func() error {
		out, err := sdk.NewClient(lb.URL, key).StreamTask(ctx, "t1", func(c string) error { got <- c; return nil })
		if err == nil && (out.Status != "completed" || out.TaskID != "t1") {
			t.Errorf("outcome %+v", out)
		}
		return err
	})
	var chunks []string
	for range 4 {
		chunks = append(chunks, waitFor(t, got, 5*time.Second))
	}
	a.stop()
	feed(t, b.streams, "t1", 5, 7) // while the SDK reconnects, or after
	for range 3 {
		chunks = append(chunks, waitFor(t, got, 5*time.Second))
	}
	feed(t, b.streams, "t1", 8, 10)
	if err := b.streams.End(context.Background(), "t1", []byte(`{"task_id":"t1","status":"completed","result":"…"}`)); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, res, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	close(got)
	for c := range got {
		chunks = append(chunks, c)
	}
	if s := strings.Join(chunks, ","); s != "c1,c2,c3,c4,c5,c6,c7,c8,c9,c10" {
		t.Fatalf("chunks %s, want c1..c10 once each", s)
	}
	if n := conns.Load(); n < 2 {
		t.Fatalf("%d connections through the balancer, want a reconnect", n)
	}
}
