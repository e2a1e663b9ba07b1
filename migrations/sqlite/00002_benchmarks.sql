-- Node benchmarks: the last profile each node produced.

-- +goose Up
CREATE TABLE benchmarks (
    node_id     TEXT PRIMARY KEY,
    profile     TEXT NOT NULL,    -- JSON, as GET /api/v1/benchmark/{node_id} shows it
    measured_at INTEGER NOT NULL  -- unix microseconds
);

-- +goose Down
DROP TABLE benchmarks;
