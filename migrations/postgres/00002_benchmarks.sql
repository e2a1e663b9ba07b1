-- Node benchmarks: the last profile each node produced.

-- +goose Up
CREATE TABLE benchmarks (
    node_id     TEXT PRIMARY KEY,
    profile     JSONB NOT NULL,   -- as GET /api/v1/benchmark/{node_id} shows it
    measured_at TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE benchmarks;
