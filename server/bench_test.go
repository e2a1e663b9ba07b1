package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

// benchSetup starts an instance with limits off and nodes echo nodes, all
// in this process.
func benchSetup(b *testing.B, nodes, concurrency int) (*testApp, string) {
	ta := startApp(b, func(c *Config) {
		c.MaxNodesPerAccount = 1000
		c.StoreFlushInterval = 200 * time.Millisecond
	})
	key := ta.account(b, "bench", "")
	startEchoNodes(b, ta.wsURL, key, nodes, concurrency)
	return ta, key
}

// benchProcess starts the built switchyard binary as its own process (as
// in production: its garbage collector and scheduler are not shared with
// the load generator), with nodes echo nodes in this process.
func benchProcess(b *testing.B, nodes, concurrency int) (url, key string) {
	url, key, _ = benchInstance(b, []string{"--data-dir", b.TempDir()}, nil)
	startEchoNodes(b, "ws"+strings.TrimPrefix(url, "http")+"/ws/node", key, nodes, concurrency)
	return url, key
}

// benchInstance creates an account in the store that storeArgs name (an
// SQLite --data-dir, or a --database-url) and starts an instance on it,
// with serveArgs more and every rate limit off, stopped when the benchmark
// ends. It returns the instance's URL, the account's key and its process.
func benchInstance(b *testing.B, storeArgs, serveArgs []string) (url, key string, proc *os.Process) {
	bin := buildBinary(b)
	out, err := exec.Command(bin, append([]string{"accounts", "create", "--name", "bench"}, storeArgs...)...).Output()
	if err != nil {
		b.Fatalf("accounts create: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key = lines[len(lines)-1]
	port := freePort(b)
	args := append([]string{"serve", "--listen", "127.0.0.1:" + port, "--log-level", "warn",
		"--request-rate", "-1", "--public-rate", "-1", "--handshake-rate", "-1", "--max-nodes-per-account", "1000"}, storeArgs...)
	cmd := exec.Command(bin, append(args, serveArgs...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	url = "http://127.0.0.1:" + port
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(url + "/livez"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the server did not start")
		}
		time.Sleep(20 * time.Millisecond) // polling a process that signals nothing else
	}
	return url, key, cmd.Process
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

func buildBinary(b *testing.B) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "switchyard-bench")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = dir + "/switchyard"
		out, err := exec.Command("go", "build", "-o", builtBin, "github.com/switchyard-dev/switchyard/cmd/switchyard").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return builtBin
}

func freePort(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startEchoNodes runs SDK echo nodes until the benchmark ends.
func startEchoNodes(b *testing.B, wsURL, key string, nodes, concurrency int) {
	startNodes(b, wsURL, key, nodes, concurrency, handlers.Echo())
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 1024}}
}

func post(c *http.Client, url, key string, body string) (result, time.Duration, error) {
	start := time.Now()
	req, _ := http.NewRequest("POST", url+"/api/v1/request", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		return result{}, 0, err
	}
	var r result
	err = json.NewDecoder(resp.Body).Decode(&r)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return r, took, err
}

// BenchmarkPlainThroughput is plain requests per second through one
// instance to in-process echo nodes over loopback, as fast as 64
// concurrent clients can send them.
func BenchmarkPlainThroughput(b *testing.B) {
	ta, key := benchSetup(b, 4, 256)
	c := benchClient()
	var failed atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := post(c, ta.url, key, `{"task_type":"echo","content":"hello"}`); err != nil {
				failed.Add(1)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	if failed.Load() > 0 {
		b.Fatalf("%d of %d requests failed", failed.Load(), b.N)
	}
}

// BenchmarkPlainThroughputProcess is BenchmarkPlainThroughput with the
// instance in its own process.
func BenchmarkPlainThroughputProcess(b *testing.B) {
	url, key := benchProcess(b, 4, 256)
	c := benchClient()
	var failed atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := post(c, url, key, `{"task_type":"echo","content":"hello"}`); err != nil {
				failed.Add(1)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	if failed.Load() > 0 {
		b.Fatalf("%d of %d requests failed", failed.Load(), b.N)
	}
}

// BenchmarkOverheadAt1000rps sends b.N requests at a steady 1,000 per
// second and reports the coordinator's overhead: the client's latency
// minus the processing time the node reported.
//
// The instance runs as its own process; the clients and nodes share this
// one, and the machine's cores with it.
func BenchmarkOverheadAt1000rps(b *testing.B) {
	url, key := benchProcess(b, 4, 256)
	c := benchClient()
	overheads := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	var failed atomic.Int64
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, took, err := post(c, url, key, `{"task_type":"echo","content":"hello"}`)
			if err != nil {
				failed.Add(1)
				return
			}
			overheads[i] = took - time.Duration(r.ProcessingTimeMs)*time.Millisecond
		}()
	}
	wg.Wait()
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d of %d requests failed", failed.Load(), b.N)
	}
	slices.Sort(overheads)
	pct := func(p float64) float64 {
		return float64(overheads[int(p*float64(len(overheads)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(1), "max-ms")
}

// BenchmarkIdleNodeMemory is the memory each idle node connection costs
// the instance: Go heap and stacks in use after a GC, with N idle nodes
// connected from another process, minus the same with none.
func BenchmarkIdleNodeMemory(b *testing.B) {
	const nodes = 2000
	ta := startApp(b, func(c *Config) { c.MaxNodesPerAccount = nodes + 1 })
	key := ta.account(b, "idle", "")
	beforeHeap, beforeStack := inUse()
	// The nodes live in a child process (this test binary, re-executed), so
	// their memory is not counted here.
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleNodesChild$")
	cmd.Env = append(os.Environ(), "SWITCHYARD_IDLE_CHILD="+ta.wsURL, "SWITCHYARD_IDLE_KEY="+key, "SWITCHYARD_IDLE_N="+strconv.Itoa(nodes))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		b.Log("child:", sc.Text())
	}
	if ta.hub.Len() != nodes {
		b.Fatalf("%d nodes connected, want %d", ta.hub.Len(), nodes)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		heap, stack := inUse()
		b.ReportMetric(float64(heap+stack-beforeHeap-beforeStack)/nodes/1024, "KiB/node")
		b.ReportMetric(float64(heap-beforeHeap)/nodes/1024, "heap-KiB/node")
		b.ReportMetric(float64(stack-beforeStack)/nodes/1024, "stack-KiB/node")
	}
}

// inUse is the Go heap and goroutine stacks in use, after a collection.
// Two collections: stacks shrink during one, and what that frees shows in
// the next.
func inUse() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.StackInuse
}

// TestIdleNodesChild is BenchmarkIdleNodeMemory's child process: it holds
// N registered, idle nodes until its stdin closes.
func TestIdleNodesChild(t *testing.T) {
	url := os.Getenv("SWITCHYARD_IDLE_CHILD")
	if url == "" {
		t.Skip("run by BenchmarkIdleNodeMemory")
	}
	n, _ := strconv.Atoi(os.Getenv("SWITCHYARD_IDLE_N"))
	key := os.Getenv("SWITCHYARD_IDLE_KEY")
	for i := 0; i < n; i++ {
		node := nodetest.Connect(t, url, nodetest.Reg(key, fmt.Sprintf("idle-%d", i), "echo"))
		_ = node
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
