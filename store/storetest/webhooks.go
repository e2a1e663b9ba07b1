package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// RunWebhooks is the behavioural suite of store.WebhookStore (the webhook
// outbox and secrets), run on the Webhooks of a store from open.
func RunWebhooks(t *testing.T, open func(t *testing.T) store.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, ws store.WebhookStore)
	}{
		{"EnqueueIdempotent", testDeliveryEnqueueIdempotent},
		{"EnqueueInvalid", testDeliveryEnqueueInvalid},
		{"ClaimDueOnly", testDeliveryClaimDueOnly},
		{"RetryAndFencing", testDeliveryRetryAndFencing},
		{"LapsedLeaseReclaimed", testDeliveryLapsedLease},
		{"Finish", testDeliveryFinish},
		{"ConcurrentClaims", testDeliveryConcurrentClaims},
		{"Secrets", testWebhookSecrets},
		{"ConcurrentFirstSecret", testWebhookSecretConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t).Webhooks())
		})
	}
}

// wt0 is a fixed clock: the outbox takes every time from its caller.
var wt0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func delivery(id string, at time.Time) store.Delivery {
	return store.Delivery{EventID: id, AccountID: "acc", URL: "https://example.com/hook", Body: []byte(`{"id":"` + id + `"}`), NextAt: at}
}

func enqueueD(t *testing.T, ws store.WebhookStore, d store.Delivery) {
	t.Helper()
	noErr(t, ws.EnqueueDelivery(ctx(t), d, wt0), "EnqueueDelivery "+d.EventID)
}

func claimD(t *testing.T, ws store.WebhookStore, owner string, limit int, now time.Time) []store.Delivery {
	t.Helper()
	ds, err := ws.ClaimDeliveries(ctx(t), owner, limit, time.Minute, now)
	noErr(t, err, "ClaimDeliveries")
	return ds
}

func testDeliveryEnqueueIdempotent(t *testing.T, ws store.WebhookStore) {
	c := ctx(t)
	enqueueD(t, ws, delivery("e1", wt0))
	again := delivery("e1", wt0.Add(time.Hour))
	again.Body = []byte(`{"other":true}`)
	enqueueD(t, ws, again) // not an error, and changes nothing
	d, err := ws.Delivery(c, "e1")
	noErr(t, err, "Delivery")
	if string(d.Body) != `{"id":"e1"}` || !d.NextAt.Equal(wt0) || d.Status != store.DeliveryPending || d.Attempts != 0 {
		t.Fatalf("after a second enqueue: %+v", d)
	}
	if !d.FirstAttemptAt.IsZero() {
		t.Errorf("FirstAttemptAt %v before any attempt", d.FirstAttemptAt)
	}
	n, err := ws.PendingDeliveries(c)
	noErr(t, err, "PendingDeliveries")
	if n != 1 {
		t.Errorf("%d pending, want 1", n)
	}
	_, err = ws.Delivery(c, "nope")
	isErr(t, err, store.ErrNotFound, "Delivery of an unknown id")
}

func testDeliveryEnqueueInvalid(t *testing.T, ws store.WebhookStore) {
	for _, d := range []store.Delivery{
		{AccountID: "a", URL: "u", NextAt: wt0},
		{EventID: "e", URL: "u", NextAt: wt0},
		{EventID: "e", AccountID: "a", NextAt: wt0},
		{EventID: "e", AccountID: "a", URL: "u"},
	} {
		isErr(t, ws.EnqueueDelivery(ctx(t), d, wt0), store.ErrInvalid, fmt.Sprintf("EnqueueDelivery(%+v)", d))
	}
}

func testDeliveryClaimDueOnly(t *testing.T, ws store.WebhookStore) {
	enqueueD(t, ws, delivery("later", wt0.Add(time.Minute)))
	enqueueD(t, ws, delivery("b", wt0.Add(-time.Second)))
	enqueueD(t, ws, delivery("a", wt0.Add(-2*time.Second)))
	ds := claimD(t, ws, "i1", 10, wt0)
	if len(ds) != 2 {
		t.Fatalf("claimed %d, want the 2 due", len(ds))
	}
	got := map[string]store.Delivery{ds[0].EventID: ds[0], ds[1].EventID: ds[1]}
	for _, id := range []string{"a", "b"} {
		d, ok := got[id]
		if !ok {
			t.Fatalf("%s not claimed: %+v", id, ds)
		}
		if d.Attempts != 1 || d.Gen != 1 || !d.FirstAttemptAt.Equal(wt0) || d.AccountID != "acc" || d.URL != "https://example.com/hook" {
			t.Errorf("claimed %+v", d)
		}
	}
	if again := claimD(t, ws, "i2", 10, wt0.Add(30*time.Second)); len(again) != 0 {
		t.Errorf("leased deliveries claimed again: %+v", again)
	}
	if lim := claimD(t, ws, "i2", 0, wt0.Add(time.Hour)); len(lim) != 0 {
		t.Errorf("a claim of 0 returned %d", len(lim))
	}
}

func testDeliveryRetryAndFencing(t *testing.T, ws store.WebhookStore) {
	c := ctx(t)
	enqueueD(t, ws, delivery("e", wt0))
	d := claimD(t, ws, "i1", 1, wt0)[0]
	next := wt0.Add(2 * time.Second)
	noErr(t, ws.RetryDelivery(c, "e", d.Gen, next, "500 Internal Server Error"), "RetryDelivery")
	isErr(t, ws.RetryDelivery(c, "e", d.Gen, next, "x"), store.ErrConflict, "a second RetryDelivery of one attempt")
	if ds := claimD(t, ws, "i1", 1, next.Add(-time.Millisecond)); len(ds) != 0 {
		t.Fatalf("claimed before its next_at: %+v", ds)
	}
	d2 := claimD(t, ws, "i2", 1, next)[0]
	if d2.Attempts != 2 || d2.Gen != d.Gen+1 || !d2.FirstAttemptAt.Equal(wt0) || d2.LastError != "500 Internal Server Error" {
		t.Fatalf("second claim %+v", d2)
	}
	isErr(t, ws.FinishDelivery(c, "e", d.Gen, store.DeliveryDelivered, "", next), store.ErrConflict, "FinishDelivery by a stale generation")
	noErr(t, ws.FinishDelivery(c, "e", d2.Gen, store.DeliveryDelivered, "", next), "FinishDelivery")
}

func testDeliveryLapsedLease(t *testing.T, ws store.WebhookStore) {
	enqueueD(t, ws, delivery("e", wt0))
	d := claimD(t, ws, "dead", 1, wt0)[0]
	if ds := claimD(t, ws, "i2", 1, wt0.Add(59*time.Second)); len(ds) != 0 {
		t.Fatalf("claimed under a live lease: %+v", ds)
	}
	ds := claimD(t, ws, "i2", 1, wt0.Add(61*time.Second))
	if len(ds) != 1 || ds[0].Gen != d.Gen+1 || ds[0].Attempts != 2 {
		t.Fatalf("after the lease lapsed: %+v", ds)
	}
	isErr(t, ws.RetryDelivery(ctx(t), "e", d.Gen, wt0, "late"), store.ErrConflict, "RetryDelivery by the lapsed holder")
}

func testDeliveryFinish(t *testing.T, ws store.WebhookStore) {
	c := ctx(t)
	enqueueD(t, ws, delivery("ok", wt0))
	enqueueD(t, ws, delivery("gone", wt0))
	ds := claimD(t, ws, "i1", 2, wt0)
	gens := map[string]int64{}
	for _, d := range ds {
		gens[d.EventID] = d.Gen
	}
	isErr(t, ws.FinishDelivery(c, "ok", gens["ok"], store.DeliveryPending, "", wt0), store.ErrInvalid, "FinishDelivery pending")
	noErr(t, ws.FinishDelivery(c, "ok", gens["ok"], store.DeliveryDelivered, "", wt0), "FinishDelivery delivered")
	noErr(t, ws.FinishDelivery(c, "gone", gens["gone"], store.DeliveryGivenUp, "timeout", wt0), "FinishDelivery given up")
	for id, want := range map[string]string{"ok": store.DeliveryDelivered, "gone": store.DeliveryGivenUp} {
		d, err := ws.Delivery(c, id)
		noErr(t, err, "Delivery")
		if d.Status != want {
			t.Errorf("%s: status %q, want %q", id, d.Status, want)
		}
	}
	if ds := claimD(t, ws, "i1", 10, wt0.Add(48*time.Hour)); len(ds) != 0 {
		t.Errorf("final deliveries claimed: %+v", ds)
	}
	n, err := ws.PendingDeliveries(c)
	noErr(t, err, "PendingDeliveries")
	if n != 0 {
		t.Errorf("%d pending, want 0", n)
	}
}

func testDeliveryConcurrentClaims(t *testing.T, ws store.WebhookStore) {
	const n = 60
	for i := range n {
		enqueueD(t, ws, delivery(fmt.Sprintf("e%02d", i), wt0))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	errs := parallel(t, func(w int) error {
		for {
			ds, err := ws.ClaimDeliveries(ctx(t), fmt.Sprintf("inst-%d", w), 3, time.Minute, wt0)
			if err != nil {
				return err
			}
			if len(ds) == 0 {
				return nil
			}
			mu.Lock()
			for _, d := range ds {
				seen[d.EventID]++
			}
			mu.Unlock()
		}
	})
	for _, err := range errs {
		noErr(t, err, "ClaimDeliveries")
	}
	if len(seen) != n {
		t.Fatalf("%d deliveries claimed, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("%s claimed %d times", id, k)
		}
	}
}

func testWebhookSecrets(t *testing.T, ws store.WebhookStore) {
	c := ctx(t)
	s, err := ws.WebhookSecret(c, "acc", "whsec_first")
	noErr(t, err, "WebhookSecret")
	if s != "whsec_first" {
		t.Fatalf("first secret %q, want the candidate", s)
	}
	if s, _ = ws.WebhookSecret(c, "acc", "whsec_other"); s != "whsec_first" {
		t.Fatalf("second call returned %q: a candidate replaced the secret", s)
	}
	noErr(t, ws.SetWebhookSecret(c, "acc", "whsec_rotated", wt0), "SetWebhookSecret")
	if s, _ = ws.WebhookSecret(c, "acc", "whsec_other"); s != "whsec_rotated" {
		t.Fatalf("after rotation %q, want whsec_rotated", s)
	}
	noErr(t, ws.SetWebhookSecret(c, "new", "whsec_set", wt0), "SetWebhookSecret of an account with none")
	if s, _ = ws.WebhookSecret(c, "new", "x"); s != "whsec_set" {
		t.Fatalf("set secret read back as %q", s)
	}
	_, err = ws.WebhookSecret(c, "acc", "")
	isErr(t, err, store.ErrInvalid, "WebhookSecret with no candidate")
	isErr(t, ws.SetWebhookSecret(c, "acc", "", wt0), store.ErrInvalid, "SetWebhookSecret empty")
}

// Concurrent first sends of one account must sign with one secret.
func testWebhookSecretConcurrent(t *testing.T, ws store.WebhookStore) {
	got := make([]string, workers)
	errs := parallel(t, func(w int) error {
		s, err := ws.WebhookSecret(ctx(t), "acc", fmt.Sprintf("whsec_%d", w))
		got[w] = s
		return err
	})
	for _, err := range errs {
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			noErr(t, err, "WebhookSecret")
		}
	}
	for _, s := range got {
		if s != got[0] {
			t.Fatalf("concurrent first secrets differ: %v", got)
		}
	}
}
