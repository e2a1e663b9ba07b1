-- Dead letters: records the history writer could not store because the
-- database refused them (a task type too long for usage_daily's key, a value
-- out of range, a constraint), set aside so that every other record is still
-- written (invariant 17). Each row is bounded by the store (the record's JSON
-- cut at 4,096 bytes, record_bytes its whole length; the error at 2,048; the
-- ids at 256) so that a dead letter is never refused itself, and only the id
-- is indexed: a long value in an index is what refused the record. The
-- writer keeps the newest 10,000 rows.

-- +goose Up
CREATE TABLE dead_letters (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         TEXT NOT NULL, -- task, outcome, usage or suspension
    task_id      TEXT NOT NULL, -- '' for an outcome or a suspension
    account_id   TEXT NOT NULL,
    error        TEXT NOT NULL, -- the database's refusal
    created_at   TIMESTAMPTZ NOT NULL,
    record       TEXT NOT NULL, -- JSON, or its first 4,096 bytes (not jsonb: a cut is not valid JSON)
    record_bytes BIGINT NOT NULL
);

-- +goose Down
DROP TABLE dead_letters;
