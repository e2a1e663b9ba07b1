-- Dead letters: records the history writer could not store because the
-- database refused them (a value over a limit, a constraint), set aside so
-- that every other record is still written (invariant 17). Each row is
-- bounded by the store (the record's JSON cut at 4,096 bytes, record_bytes
-- its whole length; the error at 2,048; the ids at 256) so that a dead letter
-- is never refused itself, and only the id is indexed. The writer keeps the
-- newest 10,000 rows.

-- +goose Up
CREATE TABLE dead_letters (
    id           INTEGER PRIMARY KEY,
    kind         TEXT NOT NULL, -- task, outcome, usage or suspension
    task_id      TEXT NOT NULL, -- '' for an outcome or a suspension
    account_id   TEXT NOT NULL,
    error        TEXT NOT NULL, -- the database's refusal
    created_at   INTEGER NOT NULL, -- unix microseconds, as tasks.finished_at
    record       TEXT NOT NULL, -- JSON, or its first 4,096 bytes
    record_bytes INTEGER NOT NULL
);

-- +goose Down
DROP TABLE dead_letters;
