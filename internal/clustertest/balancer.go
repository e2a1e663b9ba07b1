package clustertest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Balancer is a tiny TCP load balancer: each connection it accepts goes to
// the first backend in its list that accepts a connection (a backend whose
// dial fails is skipped), and bytes are piped both ways until either side
// closes. Nodes behind it reconnect to the next instance when theirs is gone.
type Balancer struct {
	t  testing.TB
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	backends []string
	conns    map[net.Conn]struct{}
	closed   bool
	routed   map[string]int // backend → connections sent to it
}

// NewBalancer listens on a loopback port; it stops when the test ends.
func NewBalancer(t testing.TB, backends ...string) *Balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &Balancer{t: t, ln: ln, backends: backends, conns: map[net.Conn]struct{}{}, routed: map[string]int{}}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.Close)
	return b
}

// Addr is the balancer's host:port.
func (b *Balancer) Addr() string { return b.ln.Addr().String() }

// WS is the node socket URL through the balancer.
func (b *Balancer) WS() string { return "ws://" + b.Addr() + "/ws/node" }

// Routed reports how many connections went to backend so far.
func (b *Balancer) Routed(backend string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.routed[backend]
}

// Close stops accepting, cuts every piped connection and waits for the
// balancer's goroutines. It is idempotent.
func (b *Balancer) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	_ = b.ln.Close()
	b.wg.Wait()
}

// track remembers c so Close can cut it; it reports false once closed.
func (b *Balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *Balancer) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
}

func (b *Balancer) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return // closed
		}
		if !b.track(c) {
			_ = c.Close()
			return
		}
		b.wg.Add(1)
		go b.serve(c)
	}
}

// serve dials the first backend that accepts and pipes c to it.
func (b *Balancer) serve(c net.Conn) {
	defer b.wg.Done()
	defer b.untrack(c)
	defer c.Close()
	b.mu.Lock()
	backends := append([]string(nil), b.backends...)
	b.mu.Unlock()
	var up net.Conn
	for _, addr := range backends {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			up = conn
			b.mu.Lock()
			b.routed[addr]++
			b.mu.Unlock()
			break
		}
	}
	if up == nil || !b.track(up) {
		if up != nil {
			_ = up.Close()
		}
		return
	}
	defer b.untrack(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Either side ending ends the connection: the node and the
		// instance see what they would see without the balancer.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
