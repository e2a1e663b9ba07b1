-- Retries: the attempts of a task that failed for their node's sake (its
-- socket closed, its instance died, it answered "unavailable") and were
-- run again on another node. A JSON array of {"node_id","reason"}, at most
-- three (the most a request may ask for), or '' for a task run once.

-- +goose Up
ALTER TABLE tasks ADD COLUMN retries TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE tasks DROP COLUMN retries;
