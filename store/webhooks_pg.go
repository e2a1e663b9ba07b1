package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The webhook outbox on PostgreSQL: claims take due rows with FOR UPDATE
// SKIP LOCKED, so dispatchers on several instances never wait on, or get,
// the same delivery.

func scanPGDelivery(row pgx.Row) (Delivery, error) {
	var d Delivery
	var first *time.Time
	err := row.Scan(&d.EventID, &d.AccountID, &d.URL, &d.Body, &d.Status, &d.Attempts, &d.Gen, &d.NextAt,
		&first, &d.LastError, &d.CreatedAt)
	if err != nil {
		return Delivery{}, err
	}
	d.NextAt, d.CreatedAt = d.NextAt.UTC(), d.CreatedAt.UTC()
	if first != nil {
		d.FirstAttemptAt = first.UTC()
	}
	return d, nil
}

func (s *pgStore) EnqueueDelivery(ctx context.Context, d Delivery, now time.Time) error {
	if err := checkDelivery(d); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, account_id, url, body, status, next_at, created_at)
		VALUES ($1, $2, $3, $4, 'pending', $5, $6) ON CONFLICT (event_id) DO NOTHING`,
		d.EventID, d.AccountID, d.URL, d.Body, dbTime(d.NextAt), dbTime(now))
	if err != nil {
		return fmt.Errorf("store: enqueue webhook delivery: %w", err)
	}
	return nil
}

func (s *pgStore) ClaimDeliveries(ctx context.Context, owner string, limit int, lease time.Duration, now time.Time) ([]Delivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	now = dbTime(now)
	rows, err := s.pool.Query(ctx, `WITH due AS (
			SELECT event_id FROM webhook_deliveries
			WHERE status = 'pending' AND next_at <= $1 AND (lease_until IS NULL OR lease_until < $1)
			ORDER BY next_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE webhook_deliveries w SET owner = $3, gen = gen + 1, attempts = attempts + 1,
			lease_until = $4, first_attempt_at = COALESCE(first_attempt_at, $1)
		FROM due WHERE w.event_id = due.event_id
		RETURNING `+prefixed("w.", deliveryColumns), now, limit, owner, now.Add(lease))
	if err != nil {
		return nil, fmt.Errorf("store: claim webhook deliveries: %w", err)
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		d, err := scanPGDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("store: claim webhook deliveries: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: claim webhook deliveries: %w", err)
	}
	return out, nil
}

func (s *pgStore) RetryDelivery(ctx context.Context, eventID string, gen int64, nextAt time.Time, lastError string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE webhook_deliveries SET next_at = $3, last_error = $4, owner = '', lease_until = NULL
		WHERE event_id = $1 AND gen = $2 AND status = 'pending' AND lease_until IS NOT NULL`, eventID, gen, dbTime(nextAt), lastError)
	if err != nil {
		return fmt.Errorf("store: retry webhook delivery: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return deliveryFenced(eventID, gen)
	}
	return nil
}

func (s *pgStore) FinishDelivery(ctx context.Context, eventID string, gen int64, status, lastError string, now time.Time) error {
	if err := checkFinish(status); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE webhook_deliveries SET status = $3, last_error = $4, finished_at = $5,
			owner = '', lease_until = NULL
		WHERE event_id = $1 AND gen = $2 AND status = 'pending' AND lease_until IS NOT NULL`, eventID, gen, status, lastError, dbTime(now))
	if err != nil {
		return fmt.Errorf("store: finish webhook delivery: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return deliveryFenced(eventID, gen)
	}
	return nil
}

func (s *pgStore) Delivery(ctx context.Context, eventID string) (Delivery, error) {
	d, err := scanPGDelivery(s.pool.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE event_id = $1`, eventID))
	return d, notFound(err, "webhook delivery %s", eventID)
}

func (s *pgStore) PendingDeliveries(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count pending webhook deliveries: %w", err)
	}
	return n, nil
}

func (s *pgStore) WebhookSecret(ctx context.Context, accountID, candidate string) (string, error) {
	if accountID == "" || candidate == "" {
		return "", fmt.Errorf("store: a webhook secret needs an account and a candidate: %w", ErrInvalid)
	}
	// DO UPDATE (to itself), not DO NOTHING: the row is returned either way,
	// so concurrent first sends of one account agree on one secret.
	var secret string
	err := s.pool.QueryRow(ctx, `INSERT INTO webhook_secrets (account_id, secret, created_at) VALUES ($1, $2, now())
		ON CONFLICT (account_id) DO UPDATE SET secret = webhook_secrets.secret RETURNING secret`,
		accountID, candidate).Scan(&secret)
	if err != nil {
		return "", fmt.Errorf("store: webhook secret: %w", err)
	}
	return secret, nil
}

func (s *pgStore) SetWebhookSecret(ctx context.Context, accountID, secret string, now time.Time) error {
	if accountID == "" || secret == "" {
		return fmt.Errorf("store: a webhook secret needs an account and a value: %w", ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO webhook_secrets (account_id, secret, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (account_id) DO UPDATE SET secret = EXCLUDED.secret, created_at = EXCLUDED.created_at`,
		accountID, secret, dbTime(now))
	if err != nil {
		return fmt.Errorf("store: set webhook secret: %w", err)
	}
	return nil
}
