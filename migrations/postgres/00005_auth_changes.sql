-- Revocations learnt from the database itself: one row whose seq grows with
-- every key revoked and account deleted, in the same transaction. Instances
-- read it a few times a second while they have nodes or cached keys, so a
-- revocation made anywhere (the CLI with only --database-url included)
-- acts on every instance within a second, with or without Redis.

-- +goose Up
CREATE TABLE auth_changes (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL
);
INSERT INTO auth_changes (id, seq) VALUES (1, 0);

-- +goose Down
DROP TABLE auth_changes;
