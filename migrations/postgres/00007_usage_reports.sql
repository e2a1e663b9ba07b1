-- Usage reports: what a node reported for a task it ran (its tokens, its
-- processing time, the size of its result), written by the instance that
-- holds the node, once per task and node. Each report that is stored adds to
-- its usage_daily row in the same statement (PostgreSQL) or transaction
-- (SQLite), and only when it was not stored already. From here on
-- usage_daily's tokens, node_ms and result_bytes come from these reports, and
-- its requests, completed and content_bytes from the task history: a task
-- whose requesting instance died still has its tokens counted by the
-- instance that holds its node, and a task whose client left after its node
-- answered is counted too.

-- +goose Up
CREATE TABLE usage_reports (
    task_id           TEXT NOT NULL,
    node_id           TEXT NOT NULL,
    account_id        TEXT NOT NULL,
    key_id            TEXT NOT NULL,
    task_type         TEXT NOT NULL,
    reported_at       TIMESTAMPTZ NOT NULL,
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    node_ms           BIGINT NOT NULL DEFAULT 0,
    result_bytes      BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, node_id)
);

-- +goose Down
DROP TABLE usage_reports;
