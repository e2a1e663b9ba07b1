package clustertest

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// Invariant 8: the request limit of a key holds across instances. With
// --request-rate 10 (per minute, burst 10) on A and B, 30 requests of one
// key, alternating between them, get at most 10 answers that are not 429;
// every 429 says when to retry. The task type has no node, so each allowed
// request is a quick 404: the limit applies before dispatch.
func TestRateLimitAcrossInstances(t *testing.T) { OnEachRedis(t, testRateLimitAcrossInstances) }

func testRateLimitAcrossInstances(t *testing.T, cfg Config) {
	c := New(t, cfg)
	key := c.Account("alice")
	a := c.Start("A", "--request-rate", "10")
	b := c.Start("B", "--request-rate", "10")

	ctx := testCtx(t, 15*time.Second)
	start := time.Now()
	allowed := map[string]int{}
	for i := range 30 {
		inst := []*Instance{a, b}[i%2]
		r, err := inst.Request(ctx, key, "nobody-serves-this", "x")
		if err != nil {
			t.Fatalf("request %d to %s: %v", i, inst.Name, err)
		}
		switch r.Code {
		case http.StatusTooManyRequests:
			ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
			if err != nil || ra < 1 || r.ErrorCode() != "rate_limited" {
				t.Errorf("request %d to %s: 429 %s with Retry-After %q; want code rate_limited and a Retry-After of at least 1 s",
					i, inst.Name, r.Body, r.Header.Get("Retry-After"))
			}
		case http.StatusNotFound:
			if r.ErrorCode() != "no_node_available" {
				t.Errorf("request %d to %s: 404 %s, want no_node_available", i, inst.Name, r.Body)
			}
			allowed[inst.Name]++
		default:
			t.Fatalf("request %d to %s: HTTP %d %s, want 404 or 429", i, inst.Name, r.Code, r.Body)
		}
	}
	// One more request's worth of budget comes back every 6 s.
	budget := 10 + int(time.Since(start)/(6*time.Second))
	if n := allowed["A"] + allowed["B"]; n > budget || n < 10 {
		t.Fatalf("%d of 30 requests were let through (%v), want 10: the limit is per key across instances", n, allowed)
	}
	t.Logf("let through: %v", allowed)
}
