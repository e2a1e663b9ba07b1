package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/sdk"
)

// BenchmarkMeteringCPU is what metering costs the instance: its CPU per
// request (from /proc, as the sweep counts it) for tasks whose node
// reports usage against tasks whose node reports none, on the cluster
// setup (a process with Redis and PostgreSQL: the key's tokens spent in
// Redis before the answer, the node's usage report written by the batch
// writer). The two kinds alternate in blocks of 2,000 requests (ABBA), so
// that a drifting machine weighs on both alike; b.N is the number of
// requests in all.
//
//	go test -run '^$' -bench BenchmarkMeteringCPU -benchtime 16000x ./server
func BenchmarkMeteringCPU(b *testing.B) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		b.Skip("needs /proc")
	}
	redistest.Client(b)
	bin := buildBinary(b)
	dbURL, ns := pgtest.SchemaURL(b, "bench"), redistest.Namespace(b)
	out, err := exec.Command(bin, "accounts", "create", "--name", "bench", "--database-url", dbURL).Output()
	if err != nil {
		b.Fatalf("accounts create: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key := lines[len(lines)-1]
	port := freePort(b)
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:"+port, "--database-url", dbURL,
		"--redis-url", redistest.URL(), "--namespace", ns, "--log-level", "warn",
		"--request-rate", "-1", "--public-rate", "-1", "--handshake-rate", "-1", "--max-nodes-per-account", "1000")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	url := "http://127.0.0.1:" + port
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(url + "/livez"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("the server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Echo nodes that report usage for content starting with "u".
	handler := sdk.HandlerFunc(func(_ context.Context, t *sdk.Task, _ func(string) error) (sdk.Result, error) {
		r := sdk.Result{Text: t.Content}
		if strings.HasPrefix(t.Content, "u") {
			r.Usage = &sdk.Usage{PromptTokens: len(t.Content), CompletionTokens: 2 * len(t.Content)}
		}
		return r, nil
	})
	startNodes(b, "ws://127.0.0.1:"+port+"/ws/node", key, 4, 64, handler)

	c := benchClient()
	// block sends n requests from 16 clients and returns the instance's
	// CPU per request.
	block := func(n int, content string) time.Duration {
		body := `{"task_type":"echo","content":"` + content + `"}`
		before := procCPU(b, cmd.Process.Pid)
		var next, failed atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					if _, _, err := post(c, url, key, body); err != nil {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if failed.Load() > 0 {
			b.Fatalf("%d of %d requests failed", failed.Load(), n)
		}
		return (procCPU(b, cmd.Process.Pid) - before) / time.Duration(n)
	}
	block(500, "warm-up")
	const size = 2000
	rounds := max(1, b.N/(2*size))
	var plain, metered time.Duration
	b.ResetTimer()
	for r := range rounds {
		kinds := []string{"plain", "usage"}
		if r%2 == 1 {
			kinds = []string{"usage", "plain"}
		}
		for _, k := range kinds {
			if k == "usage" {
				d := block(size, "usage-reporting task")
				metered += d
				b.Logf("round %d usage: %d µs/req", r, d.Microseconds())
			} else {
				d := block(size, "plain-echo task xyz")
				plain += d
				b.Logf("round %d plain: %d µs/req", r, d.Microseconds())
			}
		}
	}
	b.StopTimer()
	p, m := float64(plain.Microseconds())/float64(rounds), float64(metered.Microseconds())/float64(rounds)
	b.ReportMetric(p, "plain-cpu-µs/req")
	b.ReportMetric(m, "usage-cpu-µs/req")
	b.ReportMetric(m-p, "metering-µs/req")
}

// startNodes runs n SDK nodes with handler, registered before it returns.
func startNodes(b *testing.B, wsURL, key string, nodes, concurrency int, handler sdk.Handler) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	registered := make(chan string, nodes)
	for i := range nodes {
		n, err := sdk.NewNode(sdk.NodeConfig{
			URL: wsURL, APIKey: key, Name: fmt.Sprintf("echo-%d", i), Capabilities: []string{"echo"},
			MaxConcurrency: concurrency, Handler: handler, Logger: testLogger(b),
			OnRegistered: func(id string) { registered <- id },
		})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = n.Run(ctx) }()
	}
	for range nodes {
		<-registered
	}
	b.Cleanup(func() { cancel(); wg.Wait() })
}

// procCPU is a process's user+system CPU time from /proc/<pid>/stat
// (fields 14 and 15, in USER_HZ: 100 a second on Linux).
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %v %v", pid, err1, err2)
	}
	return time.Duration(ut+st) * time.Second / 100
}
