package store

import (
	"context"
	"fmt"
	"time"
)

// The outcomes of a webhook delivery: pending until an attempt gets a 2xx
// (delivered) or the retries run out (given up). The last two are final.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryGivenUp   = "given_up"
)

// Delivery is one webhook delivery as the outbox keeps it.
type Delivery struct {
	EventID   string // the de-duplication id, unique
	AccountID string // whose secret signs it
	URL       string
	Body      []byte

	Status string
	// Attempts counts the claims, so the claim that returns it is attempt
	// number Attempts.
	Attempts int
	// Gen is the fencing generation of the claim that returned it: only
	// (EventID, Gen) may settle that attempt.
	Gen            int64
	NextAt         time.Time // when it is due (again)
	FirstAttemptAt time.Time // zero until first claimed
	LastError      string
	CreatedAt      time.Time
}

// WebhookStore is the durable outbox of webhook deliveries and the accounts'
// signing secrets (package webhooks). Its calls are kept apart from
// Store's, which returns it from Store.Webhooks. Every time is the caller's clock (the
// dispatcher's, injectable in tests); a delivery is claimed by one caller
// at a time, under a lease fenced by a generation.
type WebhookStore interface {
	// EnqueueDelivery stores a new pending delivery, due at d.NextAt
	// (d.EventID, AccountID, URL, Body and NextAt set by the caller). It is
	// idempotent on EventID: a second enqueue of an id changes nothing and
	// is not an error.
	EnqueueDelivery(ctx context.Context, d Delivery, now time.Time) error
	// ClaimDeliveries leases up to limit pending deliveries that are due
	// (NextAt not after now) and not leased (no lease, or one that lapsed)
	// to owner until now+lease: Gen+1, Attempts+1, FirstAttemptAt set if
	// unset. Oldest due first. Concurrent claims never return the same
	// delivery.
	ClaimDeliveries(ctx context.Context, owner string, limit int, lease time.Duration, now time.Time) ([]Delivery, error)
	// RetryDelivery releases an attempt that failed: due again at nextAt,
	// with lastError. ErrConflict if (eventID, gen) no longer holds the
	// lease (another claim took it, the attempt was settled already, or the
	// delivery is final).
	RetryDelivery(ctx context.Context, eventID string, gen int64, nextAt time.Time, lastError string) error
	// FinishDelivery ends a delivery with status DeliveryDelivered or
	// DeliveryGivenUp; ErrConflict like RetryDelivery.
	FinishDelivery(ctx context.Context, eventID string, gen int64, status, lastError string, now time.Time) error
	// Delivery returns a delivery by event id (ErrNotFound if unknown).
	Delivery(ctx context.Context, eventID string) (Delivery, error)
	// PendingDeliveries counts the pending deliveries.
	PendingDeliveries(ctx context.Context) (int64, error)

	// WebhookSecret returns the account's signing secret, storing
	// candidate as the secret first if the account has none.
	WebhookSecret(ctx context.Context, accountID, candidate string) (string, error)
	// SetWebhookSecret replaces (or sets) the account's signing secret.
	SetWebhookSecret(ctx context.Context, accountID, secret string, now time.Time) error
}

var (
	_ WebhookStore = (*sqlStore)(nil)
	_ WebhookStore = guardedWebhooks{}
)

// Webhooks returns the store's own outbox: one database keeps both.
func (s *sqlStore) Webhooks() WebhookStore { return s }

// Webhooks returns the wrapped store's outbox, its calls under this Guard
// (deadlines, breaker) like the store's own.
func (g *Guard) Webhooks() WebhookStore { return guardedWebhooks{g: g, ws: g.st.Webhooks()} }

func checkDelivery(d Delivery) error {
	if d.EventID == "" || d.AccountID == "" || d.URL == "" {
		return fmt.Errorf("store: a webhook delivery needs an event id, an account and a URL: %w", ErrInvalid)
	}
	if d.NextAt.IsZero() {
		return fmt.Errorf("store: a webhook delivery needs a due time: %w", ErrInvalid)
	}
	return nil
}

func checkFinish(status string) error {
	if status != DeliveryDelivered && status != DeliveryGivenUp {
		return fmt.Errorf("store: %q is not a final delivery status: %w", status, ErrInvalid)
	}
	return nil
}

func deliveryFenced(id string, gen int64) error {
	return fmt.Errorf("store: webhook delivery %s: lease generation %d no longer holds it: %w", id, gen, ErrConflict)
}

const deliveryColumns = `event_id, account_id, url, body, status, attempts, gen, next_at, first_attempt_at, last_error, created_at`

// guardedWebhooks runs a WebhookStore's calls under a Guard.
type guardedWebhooks struct {
	g  *Guard
	ws WebhookStore
}

func (w guardedWebhooks) EnqueueDelivery(ctx context.Context, d Delivery, now time.Time) error {
	return guardedErr(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) error { return w.ws.EnqueueDelivery(c, d, now) })
}

func (w guardedWebhooks) ClaimDeliveries(ctx context.Context, owner string, limit int, lease time.Duration, now time.Time) ([]Delivery, error) {
	return guarded(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) ([]Delivery, error) {
		return w.ws.ClaimDeliveries(c, owner, limit, lease, now)
	})
}

func (w guardedWebhooks) RetryDelivery(ctx context.Context, eventID string, gen int64, nextAt time.Time, lastError string) error {
	return guardedErr(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) error {
		return w.ws.RetryDelivery(c, eventID, gen, nextAt, lastError)
	})
}

func (w guardedWebhooks) FinishDelivery(ctx context.Context, eventID string, gen int64, status, lastError string, now time.Time) error {
	return guardedErr(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) error {
		return w.ws.FinishDelivery(c, eventID, gen, status, lastError, now)
	})
}

func (w guardedWebhooks) Delivery(ctx context.Context, eventID string) (Delivery, error) {
	return guarded(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) (Delivery, error) { return w.ws.Delivery(c, eventID) })
}

func (w guardedWebhooks) PendingDeliveries(ctx context.Context) (int64, error) {
	return guarded(w.g, ctx, w.g.cfg.Timeout, w.ws.PendingDeliveries)
}

func (w guardedWebhooks) WebhookSecret(ctx context.Context, accountID, candidate string) (string, error) {
	return guarded(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) (string, error) {
		return w.ws.WebhookSecret(c, accountID, candidate)
	})
}

func (w guardedWebhooks) SetWebhookSecret(ctx context.Context, accountID, secret string, now time.Time) error {
	return guardedErr(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) error {
		return w.ws.SetWebhookSecret(c, accountID, secret, now)
	})
}

// The outbox in either dialect. On PostgreSQL claims take due rows with
// FOR UPDATE SKIP LOCKED, so dispatchers on several instances never wait
// on, or get, the same delivery; on SQLite (one process) every writing
// statement holds the file's write lock, so a claim's select and update are
// never interleaved with another's.

func scanDelivery(r row, d *Delivery) error {
	return r.Scan(&d.EventID, &d.AccountID, &d.URL, &d.Body, &d.Status, &d.Attempts, &d.Gen, (*timeCol)(&d.NextAt),
		(*timeCol)(&d.FirstAttemptAt), &d.LastError, (*timeCol)(&d.CreatedAt))
}

func (s *sqlStore) EnqueueDelivery(ctx context.Context, d Delivery, now time.Time) error {
	if err := checkDelivery(d); err != nil {
		return err
	}
	if d.Body == nil {
		d.Body = []byte{} // NOT NULL: nil would be bound as NULL
	}
	_, err := s.db.exec(ctx, `INSERT INTO webhook_deliveries (event_id, account_id, url, body, status, next_at, created_at)
		VALUES ($1, $2, $3, $4, 'pending', $5, $6) ON CONFLICT (event_id) DO NOTHING`,
		d.EventID, d.AccountID, d.URL, d.Body, dbTime(d.NextAt), dbTime(now))
	if err != nil {
		return fmt.Errorf("store: enqueue webhook delivery: %w", err)
	}
	return nil
}

func (s *sqlStore) ClaimDeliveries(ctx context.Context, owner string, limit int, lease time.Duration, now time.Time) ([]Delivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	now = dbTime(now)
	// The due rows are picked in a WITH of their own, which PostgreSQL runs
	// once, locking (and skipping) rows as it goes, whatever plan it picks
	// for the UPDATE around it.
	out, err := collect(ctx, s.db, scanDelivery, `WITH due AS (
			SELECT event_id AS due_id FROM webhook_deliveries
			WHERE status = 'pending' AND next_at <= $1 AND (lease_until IS NULL OR lease_until < $1)
			ORDER BY next_at LIMIT $2`+s.d.skipLocked+`)
		UPDATE webhook_deliveries SET owner = $3, gen = gen + 1, attempts = attempts + 1,
			lease_until = $4, first_attempt_at = COALESCE(first_attempt_at, $1)
		FROM due WHERE event_id = due_id
		RETURNING `+deliveryColumns, now, limit, owner, now.Add(lease))
	if err != nil {
		return nil, fmt.Errorf("store: claim webhook deliveries: %w", err)
	}
	return out, nil
}

func (s *sqlStore) RetryDelivery(ctx context.Context, eventID string, gen int64, nextAt time.Time, lastError string) error {
	n, err := s.db.exec(ctx, `UPDATE webhook_deliveries SET next_at = $3, last_error = $4, owner = '', lease_until = NULL
		WHERE event_id = $1 AND gen = $2 AND status = 'pending' AND lease_until IS NOT NULL`, eventID, gen, dbTime(nextAt), lastError)
	if err != nil {
		return fmt.Errorf("store: retry webhook delivery: %w", err)
	}
	if n == 0 {
		return deliveryFenced(eventID, gen)
	}
	return nil
}

func (s *sqlStore) FinishDelivery(ctx context.Context, eventID string, gen int64, status, lastError string, now time.Time) error {
	if err := checkFinish(status); err != nil {
		return err
	}
	n, err := s.db.exec(ctx, `UPDATE webhook_deliveries SET status = $3, last_error = $4, finished_at = $5,
			owner = '', lease_until = NULL
		WHERE event_id = $1 AND gen = $2 AND status = 'pending' AND lease_until IS NOT NULL`, eventID, gen, status, lastError, dbTime(now))
	if err != nil {
		return fmt.Errorf("store: finish webhook delivery: %w", err)
	}
	if n == 0 {
		return deliveryFenced(eventID, gen)
	}
	return nil
}

func (s *sqlStore) Delivery(ctx context.Context, eventID string) (Delivery, error) {
	d, err := queryOne(ctx, s.db, scanDelivery, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE event_id = $1`, eventID)
	return d, notFound(err, "webhook delivery %s", eventID)
}

func (s *sqlStore) PendingDeliveries(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.queryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count pending webhook deliveries: %w", err)
	}
	return n, nil
}

func (s *sqlStore) WebhookSecret(ctx context.Context, accountID, candidate string) (string, error) {
	if accountID == "" || candidate == "" {
		return "", fmt.Errorf("store: a webhook secret needs an account and a candidate: %w", ErrInvalid)
	}
	// DO UPDATE (to itself), not DO NOTHING: the row is returned either way,
	// so concurrent first sends of one account agree on one secret.
	var secret string
	err := s.db.queryRow(ctx, `INSERT INTO webhook_secrets (account_id, secret, created_at) VALUES ($1, $2, `+s.d.now+`)
		ON CONFLICT (account_id) DO UPDATE SET secret = webhook_secrets.secret RETURNING secret`,
		s.d.withNow([]any{accountID, candidate})...).Scan(&secret)
	if err != nil {
		return "", fmt.Errorf("store: webhook secret: %w", err)
	}
	return secret, nil
}

func (s *sqlStore) SetWebhookSecret(ctx context.Context, accountID, secret string, now time.Time) error {
	if accountID == "" || secret == "" {
		return fmt.Errorf("store: a webhook secret needs an account and a value: %w", ErrInvalid)
	}
	_, err := s.db.exec(ctx, `INSERT INTO webhook_secrets (account_id, secret, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (account_id) DO UPDATE SET secret = excluded.secret, created_at = excluded.created_at`,
		accountID, secret, dbTime(now))
	if err != nil {
		return fmt.Errorf("store: set webhook secret: %w", err)
	}
	return nil
}
