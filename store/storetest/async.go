package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

func asyncTask(id, account, taskType string, priority int) store.AsyncTask {
	return store.AsyncTask{ID: id, AccountID: account, TaskType: taskType, Content: "c-" + id,
		Priority: priority, TTL: time.Hour}
}

func submit(t *testing.T, st store.Store, tasks ...store.AsyncTask) {
	t.Helper()
	for _, a := range tasks {
		noErr(t, st.SubmitAsync(ctx(t), a), "SubmitAsync "+a.ID)
	}
}

func claim(t *testing.T, st store.Store, owner string, types ...string) store.AsyncTask {
	t.Helper()
	a, err := st.ClaimAsync(ctx(t), owner, types, false, time.Minute)
	noErr(t, err, "ClaimAsync")
	return a
}

func testAsyncSubmitAndRead(t *testing.T, st store.Store) {
	c := ctx(t)
	in := store.AsyncTask{ID: "t1", AccountID: "acc", KeyID: "key_1", TaskType: "llm", Content: "a\x00b \xff",
		Params: []byte(`{"max_tokens":5}`), Stream: true, Trust: "official", Priority: 7,
		WebhookURL: "https://example.com/hook", TTL: 90 * time.Minute}
	before := time.Now().Add(-time.Second)
	noErr(t, st.SubmitAsync(c, in), "SubmitAsync")
	got, err := st.AsyncTask(c, "t1")
	noErr(t, err, "AsyncTask")
	if got.Content != in.Content || string(got.Params) != string(in.Params) || !got.Stream || got.Trust != "official" ||
		got.Priority != 7 || got.WebhookURL != in.WebhookURL || got.TTL != in.TTL || got.AccountID != "acc" || got.KeyID != "key_1" || got.TaskType != "llm" {
		t.Fatalf("read back %+v, want what was submitted %+v", got, in)
	}
	if got.Status != store.AsyncQueued || got.Attempts != 0 || got.Gen != 0 || got.Owner != "" ||
		got.StartedAt != nil || got.FinishedAt != nil || got.ExpiresAt != nil || got.Usage != nil {
		t.Fatalf("a new task is %+v, want queued and untouched", got)
	}
	if got.CreatedAt.Before(before) || got.CreatedAt.Location() != time.UTC {
		t.Fatalf("CreatedAt %v, want a UTC time after %v", got.CreatedAt, before)
	}
	plain := asyncTask("t2", "acc", "llm", 5)
	noErr(t, st.SubmitAsync(c, plain), "SubmitAsync without params")
	if got, _ := st.AsyncTask(c, "t2"); got.Params != nil {
		t.Fatalf("Params %q for a task submitted without, want nil", got.Params)
	}
	isErr(t, st.SubmitAsync(c, in), store.ErrConflict, "SubmitAsync of an existing id")
	for _, bad := range []store.AsyncTask{
		{AccountID: "acc", TaskType: "llm", TTL: time.Hour},
		{ID: "x", TaskType: "llm", TTL: time.Hour},
		{ID: "x", AccountID: "acc", TTL: time.Hour},
		{ID: "x", AccountID: "acc", TaskType: "llm", Priority: 10, TTL: time.Hour},
		{ID: "x", AccountID: "acc", TaskType: "llm", Priority: -1, TTL: time.Hour},
		{ID: "x", AccountID: "acc", TaskType: "llm"},
	} {
		isErr(t, st.SubmitAsync(c, bad), store.ErrInvalid, fmt.Sprintf("SubmitAsync %+v", bad))
	}
	_, err = st.AsyncTask(c, "nope")
	isErr(t, err, store.ErrNotFound, "AsyncTask of an unknown id")
}

// Priority first; within one, the accounts take turns; oldest first
// within an account. Other task types and official-only tasks are left.
func testAsyncClaimOrder(t *testing.T, st store.Store) {
	c := ctx(t)
	for i := range 4 {
		submit(t, st, asyncTask(fmt.Sprintf("x%d", i), "X", "llm", 5))
	}
	submit(t, st, asyncTask("y0", "Y", "llm", 5), asyncTask("y1", "Y", "llm", 5),
		asyncTask("other", "Y", "img", 9), asyncTask("urgent", "X", "llm", 9))
	off := asyncTask("official", "Z", "llm", 9)
	off.Trust = "official"
	submit(t, st, off)

	var order []string
	for {
		a, err := st.ClaimAsync(c, "inst-a", []string{"llm"}, false, time.Minute)
		if err != nil {
			isErr(t, err, store.ErrNotFound, "ClaimAsync of an empty queue")
			break
		}
		if a.Status != store.AsyncRunning || a.Owner != "inst-a" || a.Gen != 1 || a.Attempts != 1 ||
			a.StartedAt == nil || !a.LeaseUntil.After(time.Now()) {
			t.Fatalf("claimed %+v, want running, owned by inst-a, gen 1, attempt 1, leased into the future", a)
		}
		order = append(order, a.ID)
	}
	want := []string{"urgent", "x0", "y0", "x1", "y1", "x2", "x3"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("claimed in the order %v, want %v", order, want)
	}
	a, err := st.ClaimAsync(c, "inst-a", []string{"img", "llm"}, true, time.Minute)
	noErr(t, err, "ClaimAsync of two types, official")
	if a.ID != "other" { // both priority 9, both their account's first: the older
		t.Fatalf("claimed %s, want other", a.ID)
	}
	if a, err = st.ClaimAsync(c, "inst-a", []string{"img", "llm"}, true, time.Minute); err != nil || a.ID != "official" {
		t.Fatalf("ClaimAsync by an official claimer = %s, %v; want official", a.ID, err)
	}
	_, err = st.ClaimAsync(c, "inst-a", nil, true, time.Minute)
	isErr(t, err, store.ErrNotFound, "ClaimAsync of no task type")
}

func testAsyncFencing(t *testing.T, st store.Store) {
	c := ctx(t)
	in := asyncTask("t", "acc", "llm", 5)
	in.WebhookURL = "https://example.com/h"
	submit(t, st, in)
	a := claim(t, st, "inst-a", "llm")
	noErr(t, st.MarkStreamed(c, "t", a.Gen), "MarkStreamed by the holder")
	isErr(t, st.MarkStreamed(c, "t", a.Gen+1), store.ErrConflict, "MarkStreamed by another generation")
	_, err := st.EndAsync(c, "t", a.Gen+1, store.AsyncEnd{Status: store.AsyncCompleted})
	isErr(t, err, store.ErrConflict, "EndAsync by another generation")
	_, err = st.EndAsync(c, "t", a.Gen, store.AsyncEnd{Status: store.AsyncRunning})
	isErr(t, err, store.ErrInvalid, "EndAsync with a live status")

	end := store.AsyncEnd{Status: store.AsyncCompleted, NodeID: "n1", Result: "r\x00!", ProcessingMs: 12,
		Usage: &store.Usage{PromptTokens: 3, CompletionTokens: 4}}
	got, err := st.EndAsync(c, "t", a.Gen, end)
	noErr(t, err, "EndAsync by the holder")
	if got.Status != store.AsyncCompleted || got.NodeID != "n1" || got.Result != end.Result || got.ProcessingMs != 12 ||
		got.Usage == nil || *got.Usage != *end.Usage || !got.Streamed || !got.WebhookPending || !got.LeaseUntil.IsZero() {
		t.Fatalf("ended %+v, want completed with the end's fields, streamed, a webhook pending, no lease", got)
	}
	if got.FinishedAt == nil || got.ExpiresAt == nil || got.ExpiresAt.Sub(*got.FinishedAt) != time.Hour {
		t.Fatalf("FinishedAt %v ExpiresAt %v, want the end and an hour (the ttl) after it", got.FinishedAt, got.ExpiresAt)
	}
	if reread, _ := st.AsyncTask(c, "t"); reread.Status != store.AsyncCompleted || reread.Result != end.Result {
		t.Fatalf("read after the end: %+v", reread)
	}
	_, err = st.EndAsync(c, "t", a.Gen, store.AsyncEnd{Status: store.AsyncFailed})
	isErr(t, err, store.ErrConflict, "EndAsync of an ended task")
	noWebhook := asyncTask("u", "acc", "llm", 5)
	submit(t, st, noWebhook)
	b := claim(t, st, "inst-a", "llm")
	got, err = st.EndAsync(c, "u", b.Gen, store.AsyncEnd{Status: store.AsyncFailed, ErrorCode: "node_error", ErrorMessage: "boom"})
	noErr(t, err, "EndAsync failed")
	if got.WebhookPending || got.Usage != nil || got.ErrorCode != "node_error" || got.ErrorMessage != "boom" || got.Streamed {
		t.Fatalf("ended %+v, want failed with its code, no webhook, no usage", got)
	}
}

func testAsyncRenewAndCancel(t *testing.T, st store.Store) {
	c := ctx(t)
	submit(t, st, asyncTask("a1", "acc", "llm", 5), asyncTask("a2", "acc", "llm", 5),
		asyncTask("b1", "acc", "llm", 5), asyncTask("q", "acc", "llm", 5))
	a1, err := st.ClaimAsync(c, "inst-a", []string{"llm"}, false, time.Second)
	noErr(t, err, "claim a1")
	claim(t, st, "inst-a", "llm")
	claim(t, st, "inst-b", "llm")

	cancel, err := st.RenewAsync(c, "inst-a", time.Hour)
	noErr(t, err, "RenewAsync")
	if len(cancel) != 0 {
		t.Fatalf("RenewAsync asked to cancel %v, nothing was cancelled", cancel)
	}
	if r, _ := st.AsyncTask(c, "a1"); !r.LeaseUntil.After(a1.LeaseUntil.Add(30 * time.Minute)) {
		t.Fatalf("lease until %v after the renewal, was %v: not extended", r.LeaseUntil, a1.LeaseUntil)
	}
	if r, _ := st.AsyncTask(c, "b1"); r.LeaseUntil.After(time.Now().Add(2 * time.Minute)) {
		t.Fatal("inst-a's renewal extended inst-b's lease")
	}

	_, err = st.CancelAsync(c, "a2", "someone-else")
	isErr(t, err, store.ErrNotFound, "CancelAsync by another account")
	r, err := st.CancelAsync(c, "a2", "acc")
	noErr(t, err, "CancelAsync of a running task")
	if r.Status != store.AsyncRunning || !r.CancelRequested {
		t.Fatalf("cancelled running task is %+v, want still running with its cancellation asked", r)
	}
	cancel, err = st.RenewAsync(c, "inst-a", time.Hour)
	noErr(t, err, "RenewAsync")
	if fmt.Sprint(cancel) != "[a2]" {
		t.Fatalf("RenewAsync asked to cancel %v, want [a2]", cancel)
	}
	if cancel, _ := st.RenewAsync(c, "inst-b", time.Hour); len(cancel) != 0 {
		t.Fatalf("inst-b asked to cancel %v", cancel)
	}

	r, err = st.CancelAsync(c, "q", "acc")
	noErr(t, err, "CancelAsync of a queued task")
	if r.Status != store.AsyncCancelled || r.FinishedAt == nil || r.ExpiresAt == nil {
		t.Fatalf("cancelled queued task is %+v, want cancelled, finished, expiring", r)
	}
	if _, err := st.ClaimAsync(c, "inst-a", []string{"llm"}, false, time.Minute); err == nil {
		t.Fatal("a cancelled task was claimed")
	}
	again, err := st.CancelAsync(c, "q", "acc")
	noErr(t, err, "CancelAsync of a final task")
	if again.Status != store.AsyncCancelled || !again.FinishedAt.Equal(*r.FinishedAt) {
		t.Fatalf("cancelling again changed the task: %+v", again)
	}
	_, err = st.CancelAsync(c, "nope", "acc")
	isErr(t, err, store.ErrNotFound, "CancelAsync of an unknown task")
}

func testAsyncRelease(t *testing.T, st store.Store) {
	c := ctx(t)
	for _, id := range []string{"retry", "streamed", "lapsed", "cancelled", "live"} {
		in := asyncTask(id, "acc", id, 5)
		if id == "cancelled" {
			in.WebhookURL = "https://example.com/h"
		}
		submit(t, st, in)
	}
	lease := map[string]time.Duration{"lapsed": -time.Second} // already lapsed
	owner := map[string]string{"lapsed": "live-inst", "live": "live-inst"}
	gens := map[string]int64{}
	for _, id := range []string{"retry", "streamed", "lapsed", "cancelled", "live"} {
		o, l := owner[id], lease[id]
		if o == "" {
			o = "dead-inst"
		}
		if l == 0 {
			l = time.Hour
		}
		a, err := st.ClaimAsync(c, o, []string{id}, false, l)
		noErr(t, err, "claim "+id)
		gens[id] = a.Gen
	}
	noErr(t, st.MarkStreamed(c, "streamed", gens["streamed"]), "MarkStreamed")
	_, err := st.CancelAsync(c, "cancelled", "acc")
	noErr(t, err, "CancelAsync")

	ended, err := st.ReleaseAsync(c, []string{"dead-inst"}, 2)
	noErr(t, err, "ReleaseAsync")
	got := map[string]store.AsyncTask{}
	for _, e := range ended {
		got[e.ID] = e
	}
	if len(ended) != 2 || got["streamed"].Status != store.AsyncFailed || got["streamed"].ErrorCode != "instance_lost" ||
		got["cancelled"].Status != store.AsyncCancelled || !got["cancelled"].WebhookPending || got["streamed"].FinishedAt == nil {
		t.Fatalf("ReleaseAsync ended %+v, want streamed failed instance_lost and cancelled cancelled (webhook pending)", ended)
	}
	for id, want := range map[string]string{"retry": store.AsyncQueued, "lapsed": store.AsyncQueued, "live": store.AsyncRunning} {
		r, err := st.AsyncTask(c, id)
		noErr(t, err, "AsyncTask "+id)
		if r.Status != want {
			t.Fatalf("%s is %s after the release, want %s", id, r.Status, want)
		}
		if want == store.AsyncQueued && (r.Owner != "" || !r.LeaseUntil.IsZero() || r.FinishedAt != nil) {
			t.Fatalf("%s went back to the queue still leased: %+v", id, r)
		}
	}
	_, err = st.EndAsync(c, "retry", gens["retry"], store.AsyncEnd{Status: store.AsyncCompleted})
	isErr(t, err, store.ErrConflict, "EndAsync by the lost holder of a released task")

	again := claim(t, st, "inst-b", "retry")
	if again.Attempts != 2 || again.Gen != gens["retry"]+1 {
		t.Fatalf("the retry is attempt %d gen %d, want 2 and %d", again.Attempts, again.Gen, gens["retry"]+1)
	}
	_, err = st.EndAsync(c, "retry", gens["retry"], store.AsyncEnd{Status: store.AsyncCompleted})
	isErr(t, err, store.ErrConflict, "EndAsync by the lost holder after the retry's claim")
	ended, err = st.ReleaseAsync(c, []string{"inst-b"}, 2)
	noErr(t, err, "ReleaseAsync")
	if len(ended) != 1 || ended[0].ID != "retry" || ended[0].Status != store.AsyncFailed {
		t.Fatalf("ReleaseAsync after two attempts ended %+v, want retry failed", ended)
	}
	ended, err = st.ReleaseAsync(c, nil, 2)
	noErr(t, err, "ReleaseAsync with nothing lost")
	if len(ended) != 0 {
		t.Fatalf("ReleaseAsync with nothing lost ended %+v", ended)
	}
}

// Concurrent claimers never get the same task, and get every one.
func testAsyncConcurrentClaims(t *testing.T, st store.Store) {
	c := ctx(t)
	const n = 40
	for i := range n {
		submit(t, st, asyncTask(fmt.Sprintf("t%02d", i), fmt.Sprintf("acc%d", i%3), "llm", i%10))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	errs := parallel(t, func(w int) error {
		for {
			a, err := st.ClaimAsync(c, fmt.Sprintf("inst-%d", w), []string{"llm"}, false, time.Minute)
			if err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return nil
				}
				return err
			}
			mu.Lock()
			seen[a.ID]++
			mu.Unlock()
		}
	})
	for _, err := range errs {
		noErr(t, err, "ClaimAsync")
	}
	if len(seen) != n {
		t.Fatalf("%d tasks claimed, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("%s claimed %d times", id, k)
		}
	}
}

func testAsyncWebhooksAndPurge(t *testing.T, st store.Store) {
	c := ctx(t)
	short := asyncTask("short", "acc", "llm", 5)
	short.TTL, short.WebhookURL = time.Millisecond, "https://example.com/h"
	long := asyncTask("long", "acc", "llm", 5)
	long.WebhookURL = "https://example.com/h"
	submit(t, st, short, long, asyncTask("queued", "acc", "other", 5))
	for _, id := range []string{"short", "long"} {
		a, err := st.ClaimAsync(c, "inst", []string{"llm"}, false, time.Minute)
		noErr(t, err, "claim")
		_, err = st.EndAsync(c, a.ID, a.Gen, store.AsyncEnd{Status: store.AsyncCompleted})
		noErr(t, err, "end "+id)
	}
	none, err := st.PendingWebhooks(c, time.Now().Add(-time.Hour), 10)
	noErr(t, err, "PendingWebhooks")
	if len(none) != 0 {
		t.Fatalf("PendingWebhooks ended before an hour ago: %d, want 0", len(none))
	}
	p, err := st.PendingWebhooks(c, time.Now().Add(time.Hour), 10)
	noErr(t, err, "PendingWebhooks")
	if len(p) != 2 {
		t.Fatalf("PendingWebhooks: %d, want 2", len(p))
	}
	noErr(t, st.ClearWebhook(c, p[0].ID), "ClearWebhook")
	if p, _ := st.PendingWebhooks(c, time.Now().Add(time.Hour), 10); len(p) != 1 {
		t.Fatalf("PendingWebhooks after a clear: %d, want 1", len(p))
	}
	n, err := st.PurgeAsync(c, time.Now().Add(time.Minute))
	noErr(t, err, "PurgeAsync")
	if n != 1 {
		t.Fatalf("PurgeAsync removed %d, want 1 (the task with a millisecond's ttl)", n)
	}
	_, err = st.AsyncTask(c, "short")
	isErr(t, err, store.ErrNotFound, "AsyncTask of a purged task")
	for _, id := range []string{"long", "queued"} {
		_, err = st.AsyncTask(c, id)
		noErr(t, err, "AsyncTask "+id+" after the purge")
	}
}

// A task claimed and not started (its owner began draining) goes back to
// the queue as it was, its attempt undone, its generation kept: the next
// claim is a new generation, and the one given back is fenced out.
func testAsyncUnclaim(t *testing.T, st store.Store) {
	c := ctx(t)
	submit(t, st, asyncTask("u", "acc", "llm", 5))
	a := claim(t, st, "i1", "llm")
	if a.ID != "u" || a.Attempts != 1 {
		t.Fatalf("claimed %+v, want u at its first attempt", a)
	}
	noErr(t, st.UnclaimAsync(c, "u", a.Gen), "UnclaimAsync")
	got, err := st.AsyncTask(c, "u")
	noErr(t, err, "AsyncTask")
	if got.Status != store.AsyncQueued || got.Owner != "" || got.Attempts != 0 || got.StartedAt != nil || !got.LeaseUntil.IsZero() || got.Gen != a.Gen {
		t.Fatalf("given back: %+v; want queued, no owner, lease or start, 0 attempts, generation %d", got, a.Gen)
	}
	isErr(t, st.UnclaimAsync(c, "u", a.Gen), store.ErrConflict, "UnclaimAsync of a queued task")
	b := claim(t, st, "i2", "llm")
	if b.ID != "u" || b.Gen != a.Gen+1 || b.Attempts != 1 {
		t.Fatalf("claimed again %+v, want u at generation %d, attempt 1", b, a.Gen+1)
	}
	isErr(t, st.UnclaimAsync(c, "u", a.Gen), store.ErrConflict, "UnclaimAsync by the earlier generation")
	if got, _ := st.AsyncTask(c, "u"); got.Status != store.AsyncRunning || got.Owner != "i2" {
		t.Fatalf("after a stale give-back the task is %+v, want still running for i2", got)
	}
}
