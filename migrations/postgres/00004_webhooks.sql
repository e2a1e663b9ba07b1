-- Webhooks: durable deliveries and per-account signing secrets.
--
-- A delivery is pending until an attempt gets a 2xx (delivered) or its
-- retries run past 24 h after the first attempt (given_up). A due pending
-- delivery (next_at passed, no live lease) is claimed by one instance at a
-- time: owner, gen (grows with every claim, fences the holder's writes),
-- lease_until. Times are the dispatchers' clocks.

-- +goose Up
CREATE TABLE webhook_deliveries (
    event_id         TEXT PRIMARY KEY,  -- the de-duplication id; Enqueue is idempotent on it
    account_id       TEXT NOT NULL,
    url              TEXT NOT NULL,
    body             BYTEA NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'given_up')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_at          TIMESTAMPTZ NOT NULL,
    first_attempt_at TIMESTAMPTZ,
    owner            TEXT NOT NULL DEFAULT '',
    gen              BIGINT NOT NULL DEFAULT 0,
    lease_until      TIMESTAMPTZ,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       TIMESTAMPTZ NOT NULL,
    finished_at      TIMESTAMPTZ
);
-- The claim's order, over pending deliveries only.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE status = 'pending';

CREATE TABLE webhook_secrets (
    account_id TEXT PRIMARY KEY,
    secret     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE webhook_secrets;
DROP TABLE webhook_deliveries;
