package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// Invariant 16, as a stranger and a tenant would try it on a real
// process: bodies of 2 MB that nest as deep as their bytes allow, or list
// as many items as they can, four at once, to every route that reads
// JSON, without a key and then with one. Before the bounds, one such body
// without a key took an instance from 87 MB to 811 MB. The instance's
// peak resident set (VmHWM) may grow by less than 64 MiB over the whole
// attack, and it must still serve afterwards. The instance runs without
// the heap floor (--gc-heap-floor-bytes -1): the floor lets the garbage
// of any instance allocating fast grow up to 64 MiB before a collection,
// by design, hostile or not, and what this test measures is the bodies'
// cost (with the floor, the same attack measured 66 MiB).
func TestHostileBodiesLeavePeakMemoryFlat(t *testing.T) {
	c := New(t, Config{NoRedis: true})
	key := c.Account("tenant")
	i := c.Start("a", "--open-registration", "--gc-heap-floor-bytes", "-1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const size = 1_990_000 // under --max-body-bytes (2,000,000)
	deep := func(prefix string) []byte {
		n := (size - len(prefix) - 1) / 2
		return []byte(prefix + strings.Repeat("[", n) + strings.Repeat("]", n) + "}")
	}
	wide := func(prefix string) []byte {
		n := (size - len(prefix) - 3) / 2
		return []byte(prefix + "[" + strings.Repeat("0,", n) + "0]}")
	}
	routes := []struct{ path, prefix string }{
		{"/api/v1/request", `{"task_type":"echo","content":"a","x":`},
		{"/api/v1/request", `{"task_type":"echo","content":"a","params":{"p":`},
		{"/api/v1/tasks", `{"task_type":"echo","content":"a","x":`},
		{"/v1/chat/completions", `{"model":"m","messages":`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a"}],"x":`},
		{"/v1/completions", `{"model":"m","prompt":`},
		{"/v1/embeddings", `{"model":"m","input":`},
		{"/api/v1/rate", `{"task_id":"t","rating":`},
		{"/api/v1/register", `{"email":`},
	}
	send := func(path, bearer string, body []byte) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, i.URL()+path, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	// Warm the routes up with small bodies, so that what the attack adds is
	// the attack's.
	for _, r := range routes {
		if _, err := send(r.path, key, []byte(r.prefix+"1}")); err != nil {
			t.Fatal(err)
		}
	}
	pid := i.cmd.Process.Pid
	before := peakRSS(t, pid)
	for _, who := range []struct{ name, key string }{{"no key", ""}, {"a wrong key", "gn_0123456789abcdef0123456789abcdef"}, {"a key", key}} {
		for _, r := range routes {
			for _, body := range [][]byte{deep(r.prefix), wide(r.prefix)} {
				var wg sync.WaitGroup
				codes := make([]int, 4)
				for n := range codes {
					wg.Go(func() {
						code, err := send(r.path, who.key, body)
						if err != nil {
							t.Errorf("%s to %s: %v", who.name, r.path, err)
						}
						codes[n] = code
					})
				}
				wg.Wait()
				for _, code := range codes {
					if code < 400 || code >= 500 {
						t.Errorf("%s to %s, %.30s…: %d, want a 4xx refusal", who.name, r.path, body, code)
					}
				}
			}
		}
	}
	grew := peakRSS(t, pid) - before
	t.Logf("peak resident set: %d MiB before, grew by %d MiB", before>>20, grew>>20)
	if grew >= 64<<20 {
		t.Errorf("the peak resident set grew by %d MiB under hostile bodies, want < 64", grew>>20)
	}
	if res, err := i.Do(ctx, http.MethodGet, "/api/v1/account", key, nil); err != nil || res.Code != http.StatusOK {
		t.Fatalf("after the attack, GET /api/v1/account: %v %v", res, err)
	}
}
