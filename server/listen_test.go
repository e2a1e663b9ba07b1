package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// limitedServer serves ta's router on a second loopback port with the
// limits l (the instance's own listener has the production defaults,
// which are too long for a test). It returns a copy of ta aimed at it.
func limitedServer(t *testing.T, ta *testApp, l httpLimits) (*testApp, *limitListener) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := newLimitListener(inner, l.MaxConnsPerIP, testLogger(t), newListenMetrics(prometheus.NewRegistry()))
	srv := newHTTPServer(ta.echo, l, testLogger(t))
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ll)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	tb := *ta
	tb.url, tb.wsURL = "http://"+inner.Addr().String(), "ws://"+inner.Addr().String()+"/ws/node"
	return &tb, ll
}

// trickle opens a connection that sends a POST /api/v1/request whose body
// never ends: one byte every 50 ms, with no API key (the attack of the
// issue: the body is read before the key is looked at). It stops when the
// connection breaks or the test ends.
func trickle(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := "POST /api/v1/request HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			time.Sleep(50 * time.Millisecond) // the attacker's pace
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	return c
}

// closedWithin reports whether the server ended the connection within d
// (an answer then the end, or a reset), while the client kept sending.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// A body trickled a byte at a time is cut off by the body deadline, for
// every such connection; the server as it was built before (a header
// deadline only) keeps them all open.
func TestSlowBodyIsCutByDeadline(t *testing.T) {
	ta := startApp(t, nil)
	const body = 300 * time.Millisecond
	limited, _ := limitedServer(t, ta, httpLimits{ReadHeaderTimeout: time.Second, BodyReadTimeout: body})
	addr := strings.TrimPrefix(limited.url, "http://")

	conns := make([]net.Conn, 20)
	for i := range conns {
		conns[i] = trickle(t, addr)
	}
	var wg sync.WaitGroup
	open := make(chan int, len(conns))
	for i, c := range conns {
		wg.Go(func() {
			// The deadline plus generous slack for a loaded machine.
			if !closedWithin(c, 10*body) {
				open <- i
			}
		})
	}
	wg.Wait()
	close(open)
	for i := range open {
		t.Errorf("slow-body connection %d still open after %s (body deadline %s)", i, 10*body, body)
	}

	// The control: the old server (header deadline only) leaves one open
	// for well past that body deadline, so the check above can fail.
	old := &http.Server{Handler: ta.echo, ReadHeaderTimeout: time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = old.Serve(ln) }()
	defer func() { _ = old.Close(); <-served }()
	if c := trickle(t, ln.Addr().String()); closedWithin(c, 4*body) {
		t.Fatal("control: the server without a body deadline closed a slow body")
	}
}

// The body deadline covers the body only: a stream that lasts well past it
// and a node socket connected through the same server are not cut.
func TestBodyDeadlineSparesStreamsAndSockets(t *testing.T) {
	ta := startApp(t, nil)
	const d = 200 * time.Millisecond
	limited, _ := limitedServer(t, ta, httpLimits{ReadHeaderTimeout: d, BodyReadTimeout: d, IdleTimeout: d})
	key := ta.account(t, "alice", "")
	n := connectNode(t, limited.wsURL, reg(key, "w", "echo"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, code := limited.stream(t, ctx, key, map[string]any{"task_type": "echo", "content": "x"})
	if code != http.StatusOK {
		t.Fatalf("HTTP %d", code)
	}
	id := n.Expect("task_assign").Payload["task_id"]
	start := time.Now()
	for time.Since(start) < 5*d {
		n.MustSend("task_chunk", map[string]any{"task_id": id, "delta": "."})
		if ev := s.next(t); ev["delta"] != "." {
			t.Fatalf("event %v", ev)
		}
		time.Sleep(d / 4) // the node's pace
	}
	n.Result(id.(string), "completed", "done")
	if ev := s.next(t); ev["done"] != true {
		t.Fatalf("a stream of %s under a body deadline of %s did not complete: %v", 5*d, d, ev)
	}
	// A plain request afterwards, on the node socket that has outlived
	// every deadline the server has.
	ch := limited.requestAsync(key, map[string]any{"task_type": "echo", "content": "y"})
	n.Result(n.Expect("task_assign").TaskID(), "completed", "y")
	var res result
	waitFor(t, ch, 5*time.Second).decode(t, &res)
	if res.Status != "completed" || res.Result != "y" {
		t.Fatalf("%+v", res)
	}
}

// rawGet sends GET path on c and reads the answer.
func rawGet(c net.Conn, br *bufio.Reader, path string) (*http.Response, error) {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// The per-address cap refuses the connection over it at once and counts
// it; a connection closed frees its place for the next.
func TestConnCapPerIP(t *testing.T) {
	ta := startApp(t, nil)
	const max = 3
	limited, ll := limitedServer(t, ta, httpLimits{ReadHeaderTimeout: 5 * time.Second, MaxConnsPerIP: max})
	addr := strings.TrimPrefix(limited.url, "http://")

	var held []net.Conn
	for i := range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// An answer proves the server accepted (and counted) it.
		if resp, err := rawGet(c, bufio.NewReader(c), "/livez"); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %v %v", i, resp, err)
		}
		held = append(held, c)
	}
	if n := ll.open("127.0.0.1"); n != max {
		t.Fatalf("%d connections counted, want %d", n, max)
	}

	over, err := net.Dial("tcp", addr) // the kernel accepts; the server closes
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if resp, err := rawGet(over, bufio.NewReader(over), "/livez"); err == nil {
		t.Fatalf("connection %d over the cap of %d was served: HTTP %d", max+1, max, resp.StatusCode)
	}
	if got := testutil.ToFloat64(ll.metrics.refused); got != 1 {
		t.Fatalf("refused counter %v, want 1", got)
	}

	// Another address is not affected: all of 127.0.0.0/8 is loopback, so
	// a second client can dial from 127.0.0.2.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	if other, err := d.Dial("tcp", addr); err != nil {
		t.Logf("cannot dial from 127.0.0.2 (%v); not checking another address", err)
	} else {
		resp, err := rawGet(other, bufio.NewReader(other), "/livez")
		other.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/livez from another address while 127.0.0.1 is at its cap: %v %v", resp, err)
		}
	}

	// Closing one frees a place. The server notices the close when its
	// read returns, so the next connection may race it: retry briefly.
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rawGet(c, bufio.NewReader(c), "/livez")
		c.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no place freed after a connection closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The others were served all along.
	if resp, err := rawGet(held[1], bufio.NewReader(held[1]), "/livez"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a held connection: %v %v", resp, err)
	}
}

// failingListener fails Accept with EMFILE n times, then reports closed.
type failingListener struct {
	net.Listener
	n int
}

func (f *failingListener) Accept() (net.Conn, error) {
	if f.n == 0 {
		return nil, net.ErrClosed
	}
	f.n--
	return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

// Accept errors are counted every time and logged at warn, not once per
// error: at EMFILE the accept loop fails as fast as it retries.
func TestAcceptErrorsCountedAndWarned(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ll := newLimitListener(&failingListener{Listener: inner, n: 50}, 0, log, newListenMetrics(prometheus.NewRegistry()))
	for range 50 {
		if _, err := ll.Accept(); !errors.Is(err, syscall.EMFILE) {
			t.Fatalf("Accept: %v", err)
		}
	}
	if _, err := ll.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after close: %v", err)
	}
	if got := testutil.ToFloat64(ll.metrics.acceptErrors); got != 50 {
		t.Fatalf("accept errors counted: %v, want 50 (a closed listener is not one)", got)
	}
	lines := strings.Count(buf.String(), "cannot accept connections")
	if lines != 1 || !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "too many open files") {
		t.Fatalf("want one warning naming the error, got %d lines:\n%s", lines, buf.String())
	}
}
