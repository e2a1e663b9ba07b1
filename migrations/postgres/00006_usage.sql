-- Usage: what each key spent, per task type and UTC day, and the limits a key
-- may be given (0: none): tokens and spend per day and month, what it may be
-- used for (nodes, clients) and which task types. Every finished task
-- adds to its row in the same statement (PostgreSQL) or transaction (SQLite)
-- that stores it in tasks, and only when that task was not stored already, so
-- the totals equal the task history's however often a batch is retried.

-- +goose Up
ALTER TABLE tasks ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
ALTER TABLE async_tasks ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN tokens_per_day BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN tokens_per_month BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN budget_per_day BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN budget_per_month BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN key_use TEXT NOT NULL DEFAULT ''; -- '' any, 'node', 'client'
ALTER TABLE api_keys ADD COLUMN task_types TEXT NOT NULL DEFAULT ''; -- comma-separated; '' any
CREATE TABLE usage_daily (
    account_id        TEXT NOT NULL,
    day               TEXT NOT NULL, -- UTC, YYYY-MM-DD
    key_id            TEXT NOT NULL,
    task_type         TEXT NOT NULL,
    requests          BIGINT NOT NULL DEFAULT 0,
    completed         BIGINT NOT NULL DEFAULT 0,
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    node_ms           BIGINT NOT NULL DEFAULT 0,
    content_bytes     BIGINT NOT NULL DEFAULT 0,
    result_bytes      BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, day, key_id, task_type)
);
CREATE INDEX usage_daily_day ON usage_daily (day);

-- +goose Down
DROP TABLE usage_daily;
ALTER TABLE api_keys DROP COLUMN task_types;
ALTER TABLE api_keys DROP COLUMN key_use;
ALTER TABLE api_keys DROP COLUMN budget_per_month;
ALTER TABLE api_keys DROP COLUMN budget_per_day;
ALTER TABLE api_keys DROP COLUMN tokens_per_month;
ALTER TABLE api_keys DROP COLUMN tokens_per_day;
ALTER TABLE async_tasks DROP COLUMN key_id;
ALTER TABLE tasks DROP COLUMN key_id;
