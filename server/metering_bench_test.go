package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/store"
)

// BenchmarkMeteringCPU is what metering costs the instance: its CPU per
// request (from /proc, as the sweep counts it) for tasks whose node
// reports usage against tasks whose node reports none, on the cluster
// setup (a process with Redis and PostgreSQL: the node's usage report
// written by the batch writer; the key has no token limits, so its tokens
// are not added to quota counters in Redis). The two kinds alternate in blocks of 2,000 requests (ABBA), so
// that a drifting machine weighs on both alike; b.N is the number of
// requests in all.
//
//	go test -run '^$' -bench BenchmarkMeteringCPU -benchtime 40000x ./server
func BenchmarkMeteringCPU(b *testing.B) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		b.Skip("needs /proc")
	}
	redistest.Client(b)
	url, key, proc := benchInstance(b, []string{"--database-url", pgtest.SchemaURL(b, "bench")},
		[]string{"--redis-url", redistest.URL(), "--namespace", redistest.Namespace(b)})
	// Echo nodes that report usage for content starting with "u".
	handler := sdk.HandlerFunc(func(_ context.Context, t *sdk.Task, _ func(string) error) (sdk.Result, error) {
		r := sdk.Result{Text: t.Content}
		if strings.HasPrefix(t.Content, "u") {
			r.Usage = &sdk.Usage{PromptTokens: len(t.Content), CompletionTokens: 2 * len(t.Content)}
		}
		return r, nil
	})
	startNodes(b, "ws"+strings.TrimPrefix(url, "http")+"/ws/node", key, 4, 64, handler)

	c := benchClient()
	// block sends n requests from 16 clients and returns the instance's
	// CPU per request.
	block := func(n int, content string) time.Duration {
		body := `{"task_type":"echo","content":"` + content + `"}`
		before := procCPU(b, proc.Pid)
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
		return (procCPU(b, proc.Pid) - before) / time.Duration(n)
	}
	block(500, "warm-up")
	const size = 2000
	rounds := max(1, b.N/(2*size))
	kinds := []struct {
		name, content string
		cpu           time.Duration // summed over the rounds
	}{{"plain", "plain-echo task xyz", 0}, {"usage", "usage-reporting task", 0}}
	b.ResetTimer()
	for r := range rounds {
		for i := range kinds {
			k := &kinds[(i+r)%2] // ABBA: each round starts with the kind the last one ended with
			d := block(size, k.content)
			k.cpu += d
			b.Logf("round %d %s: %d µs/req", r, k.name, d.Microseconds())
		}
	}
	b.StopTimer()
	p, m := float64(kinds[0].cpu.Microseconds())/float64(rounds), float64(kinds[1].cpu.Microseconds())/float64(rounds)
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

// BenchmarkQuotaHoldPerRequest is what a key's token limits add to each of
// its requests: the hold before dispatch and its settling at the end (two
// Redis round trips, one script each), against a key without limits (none),
// on an instance with Redis and PostgreSQL, one request at a time so that
// the difference is latency. The two keys alternate in blocks of 200
// (ABBA); b.N is the number of requests in all.
//
//	go test -run '^$' -bench BenchmarkQuotaHoldPerRequest -benchtime 4000x ./server
func BenchmarkQuotaHoldPerRequest(b *testing.B) {
	redistest.Client(b)
	ta := startAppWith(b, func(c *Config) {
		c.RedisURL, c.Namespace, c.DatabaseURL = redistest.URL(), redistest.Namespace(b), pgtest.SchemaURL(b, "holdbench")
		c.Logger = testLogger(b)
	}, nil)
	ctx := context.Background()
	acct, freeKey, err := ta.store.CreateAccount(ctx, "bench", "", "")
	if err != nil {
		b.Fatal(err)
	}
	_, limitedKey := ta.keyWith(b, acct.ID, store.KeyLimits{TokensPerDay: 1 << 40, BudgetPerMonth: 1 << 30})
	startNodes(b, ta.wsURL, freeKey, 2, 16, sdk.HandlerFunc(func(_ context.Context, t *sdk.Task, _ func(string) error) (sdk.Result, error) {
		return sdk.Result{Text: t.Content, Usage: &sdk.Usage{PromptTokens: len(t.Content), CompletionTokens: len(t.Content)}}, nil
	}))
	c := benchClient()
	body := `{"task_type":"echo","content":"hello there","params":{"max_tokens":64}}`
	block := func(n int, key string) time.Duration {
		start := time.Now()
		for range n {
			if _, _, err := post(c, ta.url, key, body); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start) / time.Duration(n)
	}
	block(200, freeKey)
	block(200, limitedKey)
	const size = 200
	rounds := max(1, b.N/(2*size))
	kinds := []struct {
		name, key string
		took      time.Duration // summed over the rounds
	}{{"free", freeKey, 0}, {"limited", limitedKey, 0}}
	b.ResetTimer()
	for r := range rounds {
		for i := range kinds {
			k := &kinds[(i+r)%2]
			k.took += block(size, k.key)
		}
	}
	b.StopTimer()
	f, l := float64(kinds[0].took.Microseconds())/float64(rounds), float64(kinds[1].took.Microseconds())/float64(rounds)
	b.ReportMetric(f, "free-µs/req")
	b.ReportMetric(l, "limited-µs/req")
	b.ReportMetric(l-f, "hold-µs/req")
}
