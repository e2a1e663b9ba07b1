// Package storetest is the behavioural suite every store.Store must pass.
// The SQLite and PostgreSQL implementations both run it, so that what the
// rest of switchyard relies on is stated once, here, and holds for both.
package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// Run runs the suite. open must return a fresh, empty, migrated store for
// each call and close it when the test ends.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, st store.Store)
	}{
		{"CreateAccount", testCreateAccount},
		{"CreateAccountInvalid", testCreateAccountInvalid},
		{"AccountNameTaken", testAccountNameTaken},
		{"AccountNotFound", testAccountNotFound},
		{"DeleteAccount", testDeleteAccount},
		{"CreateKey", testCreateKey},
		{"ListKeys", testListKeys},
		{"RevokeKey", testRevokeKey},
		{"SetKeyLimits", testSetKeyLimits},
		{"Authenticate", testAuthenticate},
		{"AuthSeq", testAuthSeq},
		{"WriteTasksRoundTrip", testWriteTasksRoundTrip},
		{"WriteTasksIdempotent", testWriteTasksIdempotent},
		{"WriteTasksInvalid", testWriteTasksInvalid},
		{"WriteTasksCleansText", testWriteTasksCleansText},
		{"CountCompletedSince", testCountCompletedSince},
		{"Usage", testUsage},
		{"UsageRetriedBatchCountsOnce", testUsageRetriedBatch},
		{"UsageReports", testUsageReports},
		{"ConcurrentUsage", testConcurrentUsage},
		{"RecordNode", testRecordNode},
		{"ApplyOutcomes", testApplyOutcomes},
		{"ApplyOutcomesInvalid", testApplyOutcomesInvalid},
		{"NodeStatsSelection", testNodeStatsSelection},
		{"AllNodeStatsHidesDeletedAccounts", testAllNodeStatsHidesDeleted},
		{"Suspend", testSuspend},
		{"Rate", testRate},
		{"RateErrors", testRateErrors},
		{"RateWindow", testRateWindow},
		{"RateAnyStatusWithNodes", testRateAnyStatus},
		{"Benchmarks", testBenchmarks},
		{"ConcurrentKeys", testConcurrentKeys},
		{"ConcurrentAccountsSameName", testConcurrentSameName},
		{"ConcurrentWriteTasks", testConcurrentWriteTasks},
		{"ConcurrentApplyOutcomes", testConcurrentApplyOutcomes},
		{"ConcurrentRate", testConcurrentRate},
		{"AsyncSubmitAndRead", testAsyncSubmitAndRead},
		{"AsyncClaimOrder", testAsyncClaimOrder},
		{"AsyncFencing", testAsyncFencing},
		{"AsyncUnclaim", testAsyncUnclaim},
		{"AsyncRenewAndCancel", testAsyncRenewAndCancel},
		{"AsyncRelease", testAsyncRelease},
		{"AsyncConcurrentClaims", testAsyncConcurrentClaims},
		{"AsyncWebhooksAndPurge", testAsyncWebhooksAndPurge},
		{"DeadLetters", testDeadLetters},
		{"DeadLettersBounded", testDeadLettersBounded},
		{"Ping", testPing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// isErr fails the test unless err is (wraps) want.
func isErr(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func noErr(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// norm is what a store gives back for a time: UTC, to the microsecond.
func norm(tm time.Time) time.Time { return tm.UTC().Truncate(time.Microsecond) }

func newAccount(t *testing.T, st store.Store, name string) (store.Account, string) {
	t.Helper()
	a, key, err := st.CreateAccount(ctx(t), name, name+"@example.com", "")
	noErr(t, err, "CreateAccount "+name)
	return a, key
}

func testPing(t *testing.T, st store.Store) {
	noErr(t, st.Ping(ctx(t)), "Ping")
}
