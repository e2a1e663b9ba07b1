package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/store"
)

// Config configures a Dispatcher. Zero values mean the defaults noted; New
// copies it and never changes the caller's.
type Config struct {
	// Instance names this dispatcher's leases in the outbox (the instance
	// id). Required.
	Instance string
	// AllowPrivate lets webhooks reach loopback and private networks
	// (--webhook-allow-private). Default false: they are refused.
	AllowPrivate bool
	// Concurrency bounds the sends in flight at once. Default 16.
	Concurrency int
	// AttemptTimeout bounds one attempt, from the dial to the end of the
	// answer. Default 10s.
	AttemptTimeout time.Duration
	// BackoffBase is the wait after the first failed attempt, doubled after
	// each further one up to BackoffMax (then spread by ±25 %). Defaults 1s
	// and 1h.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// RetryFor is how long after its first attempt a delivery is retried
	// before it is given up. Default 24h.
	RetryFor time.Duration
	// PollInterval is how often the outbox is asked for due deliveries when
	// nothing woke the loop (an Enqueue here wakes it at once; a delivery
	// enqueued at another instance, or due again after a backoff, waits for
	// the next poll). Default 1s.
	PollInterval time.Duration
	// Now is the clock of every due time and signature. Default time.Now.
	Now func() time.Time
	// Resolver resolves hosts at CheckURL and Enqueue, and for the dial.
	// Default net.DefaultResolver.
	Resolver *net.Resolver
	// Logger defaults to slog.Default(); Registerer, when set, receives the
	// metrics.
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 10 * time.Second
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = time.Hour
	}
	if c.RetryFor <= 0 {
		c.RetryFor = 24 * time.Hour
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Deps are what a Dispatcher uses.
type Deps struct {
	Store store.WebhookStore // the outbox and the secrets (store.Store's Webhooks)
}

// maxResponseBytes is how much of an answer is read (and discarded) so the
// connection can be reused; the rest is cut off.
const maxResponseBytes = 64 << 10

// pendingEvery is how many polls pass between counts of pending deliveries
// for the gauge.
const pendingEvery = 15

// Dispatcher sends the outbox's deliveries. New builds it and starts
// nothing; Run claims and sends. CheckURL and Enqueue work before Run: a
// delivery enqueued then waits in the outbox (durably) until a Run, here
// or at another instance, claims it.
type Dispatcher struct {
	cfg    Config
	st     store.WebhookStore
	log    *slog.Logger
	client *http.Client
	tr     *http.Transport
	m      *metrics
	lease  time.Duration

	wake  chan struct{} // capacity 1: an Enqueue or a freed slot
	slots chan struct{} // capacity Concurrency: a token per send in flight
}

// New builds a Dispatcher; Run sends.
func New(cfg Config, deps Deps) (*Dispatcher, error) {
	cfg = cfg.withDefaults()
	if cfg.Instance == "" {
		return nil, errors.New("webhooks: a dispatcher needs its instance id")
	}
	if deps.Store == nil {
		return nil, errors.New("webhooks: a dispatcher needs a store")
	}
	d := &Dispatcher{
		cfg: cfg, st: deps.Store, log: cfg.Logger.With("component", "webhooks"), m: newMetrics(cfg.Registerer),
		// The lease outlives an attempt and its settling: only a holder
		// that stalled far past its timeout can see its lease taken.
		lease: cfg.AttemptTimeout + 30*time.Second,
		wake:  make(chan struct{}, 1),
		slots: make(chan struct{}, cfg.Concurrency),
	}
	dialer := &net.Dialer{Timeout: cfg.AttemptTimeout, Resolver: cfg.Resolver}
	if !cfg.AllowPrivate {
		dialer.Control = dialControl
	}
	d.tr = &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, past the dial-time check
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   cfg.AttemptTimeout,
		MaxIdleConns:          cfg.Concurrency,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.AttemptTimeout,
	}
	d.client = &http.Client{
		Transport: d.tr,
		// A 3xx is an answer that is not a 2xx: a failure to retry. Following
		// it would call a target nobody checked.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return d, nil
}

// Run claims due deliveries and sends them until ctx ends. Then it
// cancels the sends in flight (their deliveries are released, due at once,
// for this or another instance to send again), waits for them and closes
// its idle connections, and returns nil. Run once.
func (d *Dispatcher) Run(ctx context.Context) error {
	var sends sync.WaitGroup
	d.loop(ctx, &sends)
	sends.Wait()
	d.tr.CloseIdleConnections()
	return nil
}

// CheckURL returns nil if raw may be called, else an error (wrapping
// ErrTarget) whose message says what to change. Without AllowPrivate the
// host is resolved, and an address on a private network refuses it.
func (d *Dispatcher) CheckURL(ctx context.Context, raw string) error {
	u, err := parseTarget(raw)
	if err != nil || d.cfg.AllowPrivate {
		return err
	}
	return checkHost(ctx, d.cfg.Resolver, u.Hostname())
}

// Enqueue stores a delivery of body (JSON) to url for the account, due at
// once, and wakes this instance's loop. It is durable when it returns nil,
// and idempotent on eventID: a second Enqueue of one id changes nothing.
// It refuses only a URL that does not parse (CheckURL refused it when the
// task was submitted). Where the host leads is judged at each dial
// (dialControl), with the attempts' backoff and their end: a name that
// resolved to a public address at submit time and to a private one at the
// task's end used to be refused here, for ever, so its task stayed in the
// async outbox, swept again every 30 s, and a hundred of one tenant's filled
// the sweep's batch, holding every other tenant's webhooks behind them.
func (d *Dispatcher) Enqueue(ctx context.Context, accountID, url, eventID string, body []byte) error {
	if _, err := parseTarget(url); err != nil {
		return err
	}
	return d.enqueue(ctx, accountID, url, eventID, body)
}

func (d *Dispatcher) enqueue(ctx context.Context, accountID, url, eventID string, body []byte) error {
	now := d.cfg.Now()
	err := d.st.EnqueueDelivery(ctx, store.Delivery{EventID: eventID, AccountID: accountID, URL: url, Body: body, NextAt: now}, now)
	if err != nil {
		return fmt.Errorf("webhooks: enqueue %s: %w", eventID, err)
	}
	d.poke()
	return nil
}

func (d *Dispatcher) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// loop claims due deliveries while slots are free, and starts their sends
// under sends, until ctx ends. When nothing is due it costs one query per
// PollInterval.
func (d *Dispatcher) loop(ctx context.Context, sends *sync.WaitGroup) {
	t := time.NewTimer(0)
	defer t.Stop()
	polls := 0
	failing := false // the last claim failed
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
		if polls%pendingEvery == 0 {
			d.countPending(ctx)
		}
		polls++
		wait := d.cfg.PollInterval
		if free := cap(d.slots) - len(d.slots); free > 0 {
			ds, err := d.st.ClaimDeliveries(ctx, d.cfg.Instance, free, d.lease, d.cfg.Now())
			d.m.polls.Inc()
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				// Once, not every poll: the store's own breaker logs the outage.
				failing = true
				d.log.Warn("cannot claim webhook deliveries: retrying every poll", "err", err)
			case err == nil && failing:
				failing = false
				d.log.Info("webhook deliveries claimed again")
			}
			for _, del := range ds {
				d.slots <- struct{}{} // never blocks: at most free were claimed, and only this loop takes slots
				sends.Go(func() { d.send(ctx, del) })
			}
			if len(ds) == free {
				wait = 0 // more may be due; a full house is woken by the first freed slot
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
	}
}

func (d *Dispatcher) countPending(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := d.st.PendingDeliveries(ctx); err == nil {
		d.m.pending.Set(float64(n))
	}
}

// send makes one attempt and settles it in the outbox. ctx is Run's.
func (d *Dispatcher) send(runCtx context.Context, del store.Delivery) {
	defer func() {
		<-d.slots
		d.poke()
	}()
	log := d.log.With("event_id", del.EventID, "attempt", del.Attempts)
	failure := d.attempt(runCtx, del)
	// Settling must not be cut short by Run's end: a cancelled attempt is
	// released so that it is sent again without waiting for its lease.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), 5*time.Second)
	defer cancel()
	now := d.cfg.Now()
	var err error
	switch {
	case failure == "":
		d.m.outcomes.WithLabelValues(outcomeDelivered).Inc()
		err = d.st.FinishDelivery(ctx, del.EventID, del.Gen, store.DeliveryDelivered, "", now)
	case runCtx.Err() != nil:
		err = d.st.RetryDelivery(ctx, del.EventID, del.Gen, now, "not sent: the dispatcher closed during the attempt")
	default:
		next := now.Add(Jitter(Backoff(del.Attempts, d.cfg.BackoffBase, d.cfg.BackoffMax), rand.Float64()))
		first := del.FirstAttemptAt
		if first.IsZero() {
			first = now
		}
		if next.Sub(first) > d.cfg.RetryFor {
			d.m.outcomes.WithLabelValues(outcomeGivenUp).Inc()
			log.Warn("webhook given up", "url_host", hostOf(del.URL), "account_id", del.AccountID, "since", first, "last_error", failure)
			err = d.st.FinishDelivery(ctx, del.EventID, del.Gen, store.DeliveryGivenUp, failure, now)
		} else {
			d.m.outcomes.WithLabelValues(outcomeRetried).Inc()
			log.Debug("webhook attempt failed", "err", failure, "next_at", next)
			err = d.st.RetryDelivery(ctx, del.EventID, del.Gen, next, failure)
		}
	}
	if err != nil {
		// The lease lapses and another claim tries again: at least once.
		log.Warn("cannot settle a webhook attempt", "err", err)
	}
}

// attempt POSTs the delivery once and returns "" on a 2xx, else why not.
func (d *Dispatcher) attempt(ctx context.Context, del store.Delivery) string {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.AttemptTimeout)
	defer cancel()
	secret, err := d.st.WebhookSecret(ctx, del.AccountID, NewSecret())
	if err != nil {
		return "no signing secret: " + err.Error()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, del.URL, bytes.NewReader(del.Body))
	if err != nil {
		return "bad request: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "switchyard-webhooks")
	req.Header.Set(HeaderSignature, Signature(secret, d.cfg.Now().Unix(), del.Body))
	req.Header.Set(HeaderEventID, del.EventID)
	req.Header.Set(HeaderAttempt, strconv.Itoa(del.Attempts))
	start := time.Now()
	resp, err := d.client.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
		_ = resp.Body.Close()
	}
	d.m.latency.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		// Without the URL (*url.Error's): its path or query may hold a token.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return err.Error()
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return "answered " + resp.Status
	}
	return ""
}

// hostOf is what logs show of a target: its host, never its path or query
// (they may carry a token).
func hostOf(raw string) string {
	if u, err := parseTarget(raw); err == nil {
		return u.Host
	}
	return "(invalid)"
}
