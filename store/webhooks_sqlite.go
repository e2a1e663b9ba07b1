package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The webhook outbox on SQLite: one process, and every writing statement
// holds the file's write lock, so a claim's select and update are never
// interleaved with another's.

func scanSQLiteDelivery(row row) (Delivery, error) {
	var d Delivery
	var next, created int64
	var first sql.NullInt64
	err := row.Scan(&d.EventID, &d.AccountID, &d.URL, &d.Body, &d.Status, &d.Attempts, &d.Gen, &next,
		&first, &d.LastError, &created)
	if err != nil {
		return Delivery{}, err
	}
	d.NextAt, d.CreatedAt = fromMicro(next), fromMicro(created)
	if first.Valid {
		d.FirstAttemptAt = fromMicro(first.Int64)
	}
	return d, nil
}

func (s *sqliteStore) EnqueueDelivery(ctx context.Context, d Delivery, now time.Time) error {
	if err := checkDelivery(d); err != nil {
		return err
	}
	if d.Body == nil {
		d.Body = []byte{}
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO webhook_deliveries (event_id, account_id, url, body, status, next_at, created_at)
		VALUES (?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (event_id) DO NOTHING`,
		d.EventID, d.AccountID, d.URL, d.Body, micro(d.NextAt), micro(now))
	if err != nil {
		return fmt.Errorf("store: enqueue webhook delivery: %w", err)
	}
	return nil
}

func (s *sqliteStore) ClaimDeliveries(ctx context.Context, owner string, limit int, lease time.Duration, now time.Time) ([]Delivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	n := micro(now)
	rows, err := s.db.QueryContext(ctx, `UPDATE webhook_deliveries SET owner = ?3, gen = gen + 1, attempts = attempts + 1,
			lease_until = ?4, first_attempt_at = COALESCE(first_attempt_at, ?1)
		WHERE event_id IN (SELECT event_id FROM webhook_deliveries
			WHERE status = 'pending' AND next_at <= ?1 AND (lease_until IS NULL OR lease_until < ?1)
			ORDER BY next_at LIMIT ?2)
		RETURNING `+deliveryColumns, n, limit, owner, n+lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("store: claim webhook deliveries: %w", err)
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		d, err := scanSQLiteDelivery(rows)
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

func (s *sqliteStore) RetryDelivery(ctx context.Context, eventID string, gen int64, nextAt time.Time, lastError string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE webhook_deliveries SET next_at = ?3, last_error = ?4, owner = '', lease_until = NULL
		WHERE event_id = ?1 AND gen = ?2 AND status = 'pending' AND lease_until IS NOT NULL`, eventID, gen, micro(nextAt), lastError)
	if err != nil {
		return fmt.Errorf("store: retry webhook delivery: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return deliveryFenced(eventID, gen)
	}
	return nil
}

func (s *sqliteStore) FinishDelivery(ctx context.Context, eventID string, gen int64, status, lastError string, now time.Time) error {
	if err := checkFinish(status); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE webhook_deliveries SET status = ?3, last_error = ?4, finished_at = ?5,
			owner = '', lease_until = NULL
		WHERE event_id = ?1 AND gen = ?2 AND status = 'pending' AND lease_until IS NOT NULL`, eventID, gen, status, lastError, micro(now))
	if err != nil {
		return fmt.Errorf("store: finish webhook delivery: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return deliveryFenced(eventID, gen)
	}
	return nil
}

func (s *sqliteStore) Delivery(ctx context.Context, eventID string) (Delivery, error) {
	d, err := scanSQLiteDelivery(s.db.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE event_id = ?`, eventID))
	return d, notFound(err, "webhook delivery %s", eventID)
}

func (s *sqliteStore) PendingDeliveries(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count pending webhook deliveries: %w", err)
	}
	return n, nil
}

func (s *sqliteStore) WebhookSecret(ctx context.Context, accountID, candidate string) (string, error) {
	if accountID == "" || candidate == "" {
		return "", fmt.Errorf("store: a webhook secret needs an account and a candidate: %w", ErrInvalid)
	}
	var secret string
	err := s.db.QueryRowContext(ctx, `INSERT INTO webhook_secrets (account_id, secret, created_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (account_id) DO UPDATE SET secret = secret RETURNING secret`,
		accountID, candidate, micro(time.Now())).Scan(&secret)
	if err != nil {
		return "", fmt.Errorf("store: webhook secret: %w", err)
	}
	return secret, nil
}

func (s *sqliteStore) SetWebhookSecret(ctx context.Context, accountID, secret string, now time.Time) error {
	if accountID == "" || secret == "" {
		return fmt.Errorf("store: a webhook secret needs an account and a value: %w", ErrInvalid)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO webhook_secrets (account_id, secret, created_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (account_id) DO UPDATE SET secret = excluded.secret, created_at = excluded.created_at`,
		accountID, secret, micro(now))
	if err != nil {
		return fmt.Errorf("store: set webhook secret: %w", err)
	}
	return nil
}
