// Package migrations holds switchyard's database schema as SQL migrations,
// embedded in the binary: one set per dialect (sqlite/, postgres/), with the
// same version numbers in both, each file annotated for goose
// (-- +goose Up / -- +goose Down).
//
// It owns SQL text only. Running the migrations (goose's Provider, the
// PostgreSQL session lock that keeps booting instances from racing) is the
// job of package store; nothing here opens a database.
//
// A new migration gets the next number in BOTH directories, even when one
// dialect needs no change (an empty Up/Down keeps the versions aligned, which
// TestDialectsAligned checks).
package migrations
