package server

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// benchCluster starts n instances of the built binary sharing the test
// Redis (a fresh namespace) and PostgreSQL (a fresh schema), and returns
// their base URLs and an API key.
func benchCluster(b *testing.B, n int) (urls []string, key string) {
	bin := buildBinary(b)
	dbURL := pgtest.SchemaURL(b, "bench")
	ns := redistest.Namespace(b)
	redistest.Client(b) // fails the benchmark early if Redis is unreachable
	for i := 0; i < n; i++ {
		port := freePort(b)
		cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:"+port, "--instance-name", "bench-"+port,
			"--redis-url", redistest.URL(), "--namespace", ns, "--database-url", dbURL, "--log-level", "warn",
			"--request-rate", "-1", "--public-rate", "-1", "--handshake-rate", "-1", "--max-nodes-per-account", "1000")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
		urls = append(urls, "http://127.0.0.1:"+port)
		waitHealthy(b, urls[i])
	}
	out, err := exec.Command(bin, "accounts", "create", "--name", "bench", "--database-url", dbURL).Output()
	if err != nil {
		b.Fatalf("accounts create: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return urls, lines[len(lines)-1]
}

func waitHealthy(b *testing.B, url string) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, _, _, err := (&testApp{url: url}).do("GET", "/api/health", "", nil)
		if err == nil && c == 200 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not become ready", url)
		}
		time.Sleep(20 * time.Millisecond) // another process: nothing to wait on but its answer
	}
}

// BenchmarkCrossInstanceHop measures what the hop through Redis adds: two
// instances (separate processes), echo nodes on A only, and b.N requests
// at 100/s to each of A (served locally) and B (served by A's nodes, over
// the bus), interleaved. It reports both latency distributions and the
// difference at p50, p95 and p99.
func BenchmarkCrossInstanceHop(b *testing.B) {
	urls, key := benchCluster(b, 2)
	startEchoNodes(b, "ws"+strings.TrimPrefix(urls[0], "http")+"/ws/node", key, 4, 64)
	// B must see A's nodes in its directory before it can route to them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, err := post(benchClient(), urls[1], key, `{"task_type":"echo","content":"warm"}`); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("B never routed to A's nodes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := benchClient()
	local := make([]time.Duration, b.N)
	cross := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	var failures sync.Map
	tick := time.NewTicker(5 * time.Millisecond) // 200/s in all: 100/s to each
	defer tick.Stop()
	b.ResetTimer()
	for i := 0; i < 2*b.N; i++ {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			url, dst := urls[0], local
			if i%2 == 1 {
				url, dst = urls[1], cross
			}
			r, took, err := post(c, url, key, `{"task_type":"echo","content":"hop"}`)
			if err != nil {
				failures.Store(i, err)
				return
			}
			dst[i/2] = took - time.Duration(r.ProcessingTimeMs)*time.Millisecond
		}()
	}
	wg.Wait()
	b.StopTimer()
	failures.Range(func(k, v any) bool { b.Fatalf("request %v failed: %v", k, v); return false })
	slices.Sort(local)
	slices.Sort(cross)
	pct := func(d []time.Duration, p float64) float64 {
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
	}
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50", .50}, {"p95", .95}, {"p99", .99}} {
		b.ReportMetric(pct(local, p.q), "local-"+p.name+"-ms")
		b.ReportMetric(pct(cross, p.q), "cross-"+p.name+"-ms")
		b.ReportMetric(pct(cross, p.q)-pct(local, p.q), "added-"+p.name+"-ms")
	}
}
