package webhooks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func openSQLite(t *testing.T, dir string) store.Store {
	t.Helper()
	st, err := store.Open(testCtx(t), store.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openPG(t *testing.T, url string) store.Store {
	t.Helper()
	st, err := store.Open(testCtx(t), store.Options{DatabaseURL: url, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func outbox(t *testing.T, st store.Store) store.WebhookStore {
	t.Helper()
	return st.Webhooks()
}

// fast is a dispatcher's test configuration: loopback allowed (the
// receiver is an httptest server), backoff and polls in milliseconds.
func fast(instance string) Config {
	return Config{
		Instance: instance, AllowPrivate: true, BackoffBase: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, AttemptTimeout: 5 * time.Second, Logger: quiet,
	}
}

// start builds a dispatcher and runs it until the test ends.
func start(t *testing.T, cfg Config, ws store.WebhookStore) *Dispatcher {
	t.Helper()
	d, _ := startStop(t, cfg, ws)
	return d
}

// startStop is start, with a stop that ends the dispatcher's Run and
// returns once it has (it fails the test if Run fails).
func startStop(t *testing.T, cfg Config, ws store.WebhookStore) (*Dispatcher, func()) {
	t.Helper()
	d, err := New(cfg, Deps{Store: ws})
	if err != nil {
		t.Fatal(err)
	}
	return d, run(t, d)
}

// run runs d until the returned stop is called, or the test ends.
func run(t *testing.T, d *Dispatcher) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

type hit struct {
	header http.Header
	body   string
}

// receiver records every request and answers with status(n) for the n-th
// (from 1).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	hits   []hit
	status func(n int) int
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	r := &receiver{status: status}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.hits = append(r.hits, hit{req.Header.Clone(), string(b)})
		n := len(r.hits)
		r.mu.Unlock()
		w.WriteHeader(r.status(n))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

// eventually polls cond until it holds, failing after 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func status(t *testing.T, ws store.WebhookStore, id string) store.Delivery {
	t.Helper()
	d, err := ws.Delivery(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The bar: a receiver that answers 500 twice then 200 gets the
// delivery on the third try, each signed and carrying the same event id.
func TestRetriedUntilDelivered(t *testing.T) {
	ctx := testCtx(t)
	ws := outbox(t, openSQLite(t, t.TempDir()))
	reg := prometheus.NewRegistry()
	cfg := fast("i1")
	cfg.Registerer = reg
	d := start(t, cfg, ws)
	rcv := newReceiver(t, func(n int) int { return map[bool]int{true: 500, false: 200}[n <= 2] })

	body := []byte(`{"task_id":"t1","status":"completed","result":"ok"}`)
	if err := d.Enqueue(ctx, "acc1", rcv.URL+"/hook?token=x", "evt-1", body); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delivered", func() bool { return status(t, ws, "evt-1").Status == store.DeliveryDelivered })
	hits := rcv.got()
	if len(hits) != 3 {
		t.Fatalf("%d requests, want 3", len(hits))
	}
	secret, err := ws.WebhookSecret(ctx, "acc1", "unused")
	if err != nil || !strings.HasPrefix(secret, SecretPrefix) {
		t.Fatalf("the account's secret: %q, %v", secret, err)
	}
	for i, h := range hits {
		if h.body != string(body) {
			t.Errorf("attempt %d: body %q", i+1, h.body)
		}
		if err := sdk.VerifyWebhook(secret, h.header, []byte(h.body), time.Minute); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
		for k, want := range map[string]string{
			"Content-Type": "application/json", HeaderEventID: "evt-1", HeaderAttempt: strconv.Itoa(i + 1),
		} {
			if got := h.header.Get(k); got != want {
				t.Errorf("attempt %d: %s %q, want %q", i+1, k, got, want)
			}
		}
	}
	for outcome, want := range map[string]float64{outcomeDelivered: 1, outcomeRetried: 2, outcomeGivenUp: 0} {
		if got := testutil.ToFloat64(d.m.outcomes.WithLabelValues(outcome)); got != want {
			t.Errorf("deliveries_total{outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
	if n := testutil.CollectAndCount(reg, "switchyard_webhook_attempt_seconds"); n != 1 {
		t.Errorf("attempt histogram: %d series", n)
	}
	// A second Enqueue of a delivered event sends nothing again.
	if err := d.Enqueue(ctx, "acc1", rcv.URL+"/hook", "evt-1", body); err != nil {
		t.Fatal(err)
	}
	if err := d.Enqueue(ctx, "acc1", rcv.URL+"/hook", "evt-2", body); err != nil {
		t.Fatal(err)
	}
	eventually(t, "evt-2 delivered", func() bool { return status(t, ws, "evt-2").Status == store.DeliveryDelivered })
	if n := len(rcv.got()); n != 4 {
		t.Errorf("%d requests after a repeated and a new event, want 4", n)
	}
}

// An Enqueue wakes the loop at once: with a poll interval of an hour, the
// delivery still goes out.
func TestEnqueueWakesTheLoop(t *testing.T) {
	ws := outbox(t, openSQLite(t, t.TempDir()))
	cfg := fast("i1")
	cfg.PollInterval = time.Hour
	d := start(t, cfg, ws)
	rcv := newReceiver(t, func(int) int { return 204 })
	// Let the loop's first poll pass, so only the wake can find the delivery.
	eventually(t, "the first poll", func() bool { return testutil.ToFloat64(d.m.polls) >= 1 })
	if err := d.Enqueue(testCtx(t), "acc", rcv.URL, "e", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delivered", func() bool { return len(rcv.got()) == 1 })
}

// noClaims is an outbox whose claims find nothing: its dispatcher can
// enqueue but never send.
type noClaims struct{ store.WebhookStore }

func (noClaims) ClaimDeliveries(context.Context, string, int, time.Duration, time.Time) ([]store.Delivery, error) {
	return nil, nil
}

// A delivery enqueued, then its dispatcher stopped and its store closed
// before any send, is sent by a new dispatcher on the reopened database.
func TestDurableAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	rcv := newReceiver(t, func(int) int { return 200 })
	st1, err := store.Open(testCtx(t), store.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	d1, stop := startStop(t, fast("before"), noClaims{outbox(t, st1)})
	if err := d1.Enqueue(testCtx(t), "acc", rcv.URL, "durable", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	stop()
	st1.Close()
	if n := len(rcv.got()); n != 0 {
		t.Fatalf("sent %d times before the restart", n)
	}

	ws := outbox(t, openSQLite(t, dir))
	start(t, fast("after"), ws)
	eventually(t, "delivered after the restart", func() bool { return status(t, ws, "durable").Status == store.DeliveryDelivered })
	if hits := rcv.got(); len(hits) != 1 || hits[0].header.Get(HeaderEventID) != "durable" {
		t.Fatalf("after the restart: %+v", hits)
	}
}

// A dispatcher stopped in the middle of a send releases the delivery, and
// the next one sends it again at once (not after the lease) under the
// same event id.
func TestClosedDuringSend(t *testing.T) {
	ws := outbox(t, openSQLite(t, t.TempDir()))
	arrived := make(chan struct{}, 1)
	var calls atomic.Int32
	blocking := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server notices a closed connection only past the body
		if calls.Add(1) == 1 {
			arrived <- struct{}{}
			<-r.Context().Done() // until the dispatcher gives up the request
			return
		}
		w.WriteHeader(200)
	}))
	defer blocking.Close()
	d1, stop := startStop(t, fast("first"), ws)
	if err := d1.Enqueue(testCtx(t), "acc", blocking.URL, "mid", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	<-arrived
	stop()
	if d := status(t, ws, "mid"); d.Status != store.DeliveryPending || !strings.Contains(d.LastError, "closed") {
		t.Fatalf("after closing mid-send: %+v", d)
	}
	start(t, fast("second"), ws)
	eventually(t, "delivered by the second", func() bool { return status(t, ws, "mid").Status == store.DeliveryDelivered })
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// Two dispatchers on one PostgreSQL: each of 50 events reaches the
// receiver once, whichever instance enqueued it.
func TestTwoDispatchersDeliverEachOnce(t *testing.T) {
	url := pgtest.SchemaURL(t, "whtwo")
	wsA, wsB := outbox(t, openPG(t, url)), outbox(t, openPG(t, url))
	var mu sync.Mutex
	count := map[string]int{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		count[r.Header.Get(HeaderEventID)]++
		mu.Unlock()
		w.WriteHeader(200)
	}))
	defer rcv.Close()
	cfgA, cfgB := fast("A"), fast("B")
	cfgA.Concurrency, cfgB.Concurrency = 4, 4
	a, b := start(t, cfgA, wsA), start(t, cfgB, wsB)
	const n = 50
	for i := range n {
		d := a
		if i%2 == 1 {
			d = b
		}
		if err := d.Enqueue(testCtx(t), "acc", rcv.URL, fmt.Sprintf("e%02d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "50 delivered", func() bool {
		p, err := wsA.PendingDeliveries(testCtx(t))
		return err == nil && p == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(count) != n {
		t.Fatalf("%d events received, want %d", len(count), n)
	}
	for id, k := range count {
		if k != 1 {
			t.Errorf("%s received %d times", id, k)
		}
	}
	delivered := testutil.ToFloat64(a.m.outcomes.WithLabelValues(outcomeDelivered)) + testutil.ToFloat64(b.m.outcomes.WithLabelValues(outcomeDelivered))
	if delivered != n {
		t.Errorf("delivered counted %v times, want %d", delivered, n)
	}
}

// Without --webhook-allow-private, loopback is refused by CheckURL (at
// submit) and at the dial: the receiver on 127.0.0.1 never sees a request.
// Enqueue (at the task's end) takes it, to be refused at each dial with
// the attempts' backoff: refused there, the task's webhook stayed in the
// async outbox for ever, and filled the sweep for every tenant.
func TestLoopbackRefused(t *testing.T) {
	ctx := testCtx(t)
	ws := outbox(t, openSQLite(t, t.TempDir()))
	cfg := fast("strict")
	cfg.AllowPrivate = false
	d := start(t, cfg, ws)
	rcv := newReceiver(t, func(int) int { return 200 })
	local := strings.Replace(rcv.URL, "127.0.0.1", "localhost", 1)

	for _, u := range []string{rcv.URL, local} {
		if err := d.CheckURL(ctx, u); !errors.Is(err, ErrTarget) {
			t.Errorf("CheckURL(%s) = %v, want ErrTarget", u, err)
		}
	}
	if err := d.Enqueue(ctx, "acc", "ftp://x/", "unparsed", []byte(`{}`)); !errors.Is(err, ErrTarget) {
		t.Errorf("Enqueue of an ftp:// URL = %v, want ErrTarget", err)
	}

	if err := d.Enqueue(ctx, "acc", local, "rebound", []byte(`{}`)); err != nil {
		t.Fatalf("Enqueue(%s) = %v: a task's end must leave the outbox", local, err)
	}
	eventually(t, "a failed attempt", func() bool { return status(t, ws, "rebound").LastError != "" })
	if e := status(t, ws, "rebound").LastError; !strings.Contains(e, "loopback") || strings.Contains(e, "http://") {
		t.Errorf("last error %q: want the dial refused for loopback, without the URL", e)
	}
	if n := len(rcv.got()); n != 0 {
		t.Fatalf("the loopback receiver got %d requests", n)
	}
}

// A 3xx is not followed: it is a failed attempt, retried, and the target
// of the redirect is never called.
func TestRedirectNotFollowed(t *testing.T) {
	ws := outbox(t, openSQLite(t, t.TempDir()))
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	rcv := newReceiver(t, func(n int) int { return 302 })
	rcv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rcv.mu.Lock()
		rcv.hits = append(rcv.hits, hit{r.Header.Clone(), ""})
		rcv.mu.Unlock()
		http.Redirect(w, r, other.URL, http.StatusFound)
	})
	start(t, fast("i1"), ws)
	d := start(t, fast("i2"), ws)
	if err := d.Enqueue(testCtx(t), "acc", rcv.URL, "redir", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two attempts", func() bool { return len(rcv.got()) >= 2 })
	if e := status(t, ws, "redir").LastError; !strings.Contains(e, "302") {
		t.Errorf("last error %q", e)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target was called %d times", n)
	}
}

// Past RetryFor after its first attempt a delivery is given up, counted
// and never sent again. The clock jumps 13 h at every attempt.
func TestGivenUpAfterRetryWindow(t *testing.T) {
	ws := outbox(t, openSQLite(t, t.TempDir()))
	var offset atomic.Int64
	rcv := newReceiver(t, func(int) int {
		offset.Add(int64(13 * time.Hour))
		return 503
	})
	cfg := fast("i1")
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	d := start(t, cfg, ws)
	if err := d.Enqueue(testCtx(t), "acc", rcv.URL, "doomed", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "given up", func() bool { return status(t, ws, "doomed").Status == store.DeliveryGivenUp })
	// Attempt 1 at T fails at T+13h (retried), attempt 2 fails at T+26h.
	if n := len(rcv.got()); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}
	if got := testutil.ToFloat64(d.m.outcomes.WithLabelValues(outcomeGivenUp)); got != 1 {
		t.Errorf("given_up = %v", got)
	}
	if got := testutil.ToFloat64(d.m.outcomes.WithLabelValues(outcomeRetried)); got != 1 {
		t.Errorf("retried = %v", got)
	}
}

// Deliveries sign with the secret of the moment they are sent: after a
// rotation, the new one (and not the old).
func TestSecretRotation(t *testing.T) {
	ctx := testCtx(t)
	ws := outbox(t, openSQLite(t, t.TempDir()))
	d := start(t, fast("i1"), ws)
	rcv := newReceiver(t, func(int) int { return 200 })
	if err := d.Enqueue(ctx, "acc", rcv.URL, "before", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "first delivered", func() bool { return len(rcv.got()) == 1 })
	old, err := ws.WebhookSecret(ctx, "acc", "unused")
	if err != nil {
		t.Fatal(err)
	}
	rotated := NewSecret()
	if rotated == old || !strings.HasPrefix(rotated, SecretPrefix) || len(rotated) != len(SecretPrefix)+64 {
		t.Fatalf("NewSecret() = %q (old %q)", rotated, old)
	}
	if err := ws.SetWebhookSecret(ctx, "acc", rotated, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := d.Enqueue(ctx, "acc", rcv.URL, "after", []byte(`{"a":2}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second delivered", func() bool { return len(rcv.got()) == 2 })
	h := rcv.got()
	if err := sdk.VerifyWebhook(old, h[0].header, []byte(h[0].body), time.Minute); err != nil {
		t.Errorf("before the rotation: %v", err)
	}
	if err := sdk.VerifyWebhook(rotated, h[1].header, []byte(h[1].body), time.Minute); err != nil {
		t.Errorf("after the rotation, the new secret: %v", err)
	}
	if err := sdk.VerifyWebhook(old, h[1].header, []byte(h[1].body), time.Minute); err == nil {
		t.Error("after the rotation, the old secret still verifies")
	}
}

func TestSignature(t *testing.T) {
	// HMAC-SHA256("k", "1.{}"), computed independently (python3 hmac).
	const want = "t=1,v1=3dd49b2593d0f9a349e9e71c4bde3e2b862c2be4003fe9b4ba81332029310158"
	if got := Signature("k", 1, []byte("{}")); got != want {
		t.Fatalf("Signature = %q, want %q", got, want)
	}
}

// flakyClaims fails its first n claims, like a store that is down.
type flakyClaims struct {
	store.WebhookStore
	fails atomic.Int32
}

func (f *flakyClaims) ClaimDeliveries(ctx context.Context, owner string, limit int, lease time.Duration, now time.Time) ([]store.Delivery, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, fmt.Errorf("store: claim webhook deliveries: %w", store.ErrUnavailable)
	}
	return f.WebhookStore.ClaimDeliveries(ctx, owner, limit, lease, now)
}

// A store that cannot be reached for a while delays deliveries; it does
// not stop the loop.
func TestClaimsSurviveAStoreOutage(t *testing.T) {
	ws := &flakyClaims{WebhookStore: outbox(t, openSQLite(t, t.TempDir()))}
	ws.fails.Store(5)
	rcv := newReceiver(t, func(int) int { return 200 })
	d := start(t, fast("i1"), ws)
	if err := d.Enqueue(testCtx(t), "acc", rcv.URL, "e", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delivered after the outage", func() bool { return len(rcv.got()) == 1 })
	if ws.fails.Load() >= 0 {
		t.Errorf("delivered with %d failing claims left", ws.fails.Load()+1)
	}
}

// No more than Concurrency sends are in flight at once, and no more
// deliveries are claimed than there are free slots.
func TestConcurrencyBounded(t *testing.T) {
	ws := outbox(t, openSQLite(t, t.TempDir()))
	var inFlight, peak, total atomic.Int32
	release := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		total.Add(1)
		<-release
	}))
	defer rcv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release) // a failed check must not leave handlers blocked
		}
	}()
	cfg := fast("i1")
	cfg.Concurrency = 2
	d := start(t, cfg, ws)
	const n = 6
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("e%d", i)
		if err := d.Enqueue(testCtx(t), "acc", rcv.URL, ids[i], []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "two sends in flight", func() bool { return inFlight.Load() >= 2 })
	claimed := 0
	for _, id := range ids {
		if status(t, ws, id).Attempts > 0 {
			claimed++
		}
	}
	if claimed != 2 {
		t.Errorf("%d deliveries claimed with 2 slots full, want 2", claimed)
	}
	close(release)
	eventually(t, "all delivered", func() bool {
		p, err := ws.PendingDeliveries(testCtx(t))
		return err == nil && p == 0
	})
	if p := peak.Load(); p > 2 {
		t.Errorf("%d sends in flight at once, want at most 2", p)
	}
	if got := total.Load(); got != n {
		t.Errorf("%d requests, want %d", got, n)
	}
}

// Idle, the loop asks the outbox once per PollInterval, no more: five polls
// take at least four intervals (a loop that spun would take microseconds).
func TestIdlePollsOncePerInterval(t *testing.T) {
	ws := outbox(t, openSQLite(t, t.TempDir()))
	cfg := fast("idle")
	cfg.PollInterval = 50 * time.Millisecond
	begin := time.Now()
	d := start(t, cfg, ws)
	eventually(t, "five polls", func() bool { return testutil.ToFloat64(d.m.polls) >= 5 })
	if took := time.Since(begin); took < 4*cfg.PollInterval {
		t.Fatalf("five idle polls in %s, want at least %s", took, 4*cfg.PollInterval)
	}
}

// New starts nothing: a delivery enqueued before Run waits in the outbox,
// and the first Run sends it. Run's goroutines are gone once it returns
// (goleak, in TestMain, checks every test for the rest).
func TestNewStartsNothingRunSends(t *testing.T) {
	ws := outbox(t, openSQLite(t, t.TempDir()))
	rcv := newReceiver(t, func(int) int { return 200 })
	before := goleak.IgnoreCurrent()
	d, err := New(fast("i1"), Deps{Store: ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Enqueue(testCtx(t), "acc", rcv.URL, "early", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("New or Enqueue started a goroutine: %v", err)
	}
	if n := len(rcv.got()); n != 0 {
		t.Fatalf("sent %d times before Run", n)
	}
	stop := run(t, d)
	eventually(t, "delivered once Run runs", func() bool { return status(t, ws, "early").Status == store.DeliveryDelivered })
	stop()
	rcv.Close() // its own goroutines, before the check
	if err := goleak.Find(before); err != nil {
		t.Errorf("Run left a goroutine behind: %v", err)
	}
}
