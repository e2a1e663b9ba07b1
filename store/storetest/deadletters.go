package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/store"
)

// A dead letter is written because the store refused something, so the
// store must take any dead letter at all: fields of any size and content
// are cut to their bounds (at a character), and none is refused.
func testDeadLetters(t *testing.T, st store.Store) {
	c := ctx(t)
	dls, total, err := st.DeadLetters(c, 10)
	noErr(t, err, "DeadLetters (empty)")
	if total != 0 || dls == nil || len(dls) != 0 {
		t.Fatalf("DeadLetters of an empty store = %v, %d; want an empty list and 0", dls, total)
	}
	_, _, err = st.DeadLetters(c, 0)
	isErr(t, err, store.ErrInvalid, "DeadLetters(limit 0)")

	at := time.Now().Add(-time.Minute)
	// 9,000 characters of three bytes each, where no index could hold them
	// and a cut at a byte would split one.
	huge := `{"task_type":"` + strings.Repeat("€", 9000) + `"}`
	monster := store.DeadLetter{Kind: store.KindTask, TaskID: strings.Repeat("t", 9000), AccountID: strings.Repeat("é", 9000),
		Error: "bad\x00byte \xff and " + strings.Repeat("x", 9000), At: at, Record: huge}
	plain := store.DeadLetter{Kind: store.KindUsage, TaskID: "t-1", AccountID: "acct", Error: "refused", At: at,
		Record: `{"task_id":"t-1"}`}
	noErr(t, st.WriteDeadLetters(c, []store.DeadLetter{monster, plain}), "WriteDeadLetters")
	noErr(t, st.WriteDeadLetters(c, nil), "WriteDeadLetters(nil)")

	dls, total, err = st.DeadLetters(c, 10)
	noErr(t, err, "DeadLetters")
	if total != 2 || len(dls) != 2 {
		t.Fatalf("DeadLetters = %d of %d, want 2 of 2", len(dls), total)
	}
	if got := dls[0]; got.Kind != plain.Kind || got.TaskID != plain.TaskID || got.AccountID != plain.AccountID ||
		got.Error != plain.Error || got.Record != plain.Record || got.RecordBytes != int64(len(plain.Record)) ||
		!got.At.Equal(norm(at)) || got.ID <= dls[1].ID {
		t.Errorf("newest dead letter = %+v, want %+v as written (newest first)", got, plain)
	}
	m := dls[1]
	if m.RecordBytes != int64(len(huge)) || len(m.Record) > store.DeadLetterRecordMax || len(m.Record) < store.DeadLetterRecordMax-3 ||
		!strings.HasPrefix(huge, m.Record) {
		t.Errorf("a huge record kept %d bytes of %d (RecordBytes %d), want its first %d at most, cut at a character",
			len(m.Record), len(huge), m.RecordBytes, store.DeadLetterRecordMax)
	}
	for name, v := range map[string]string{"task_id": m.TaskID, "account_id": m.AccountID, "error": m.Error, "record": m.Record} {
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) || len(v) > store.DeadLetterRecordMax {
			t.Errorf("dead letter's %s: %d bytes, valid UTF-8 %v; want it cleaned and bounded", name, len(v), utf8.ValidString(v))
		}
	}
	if !strings.HasPrefix(m.Error, "bad") || len(m.TaskID) >= 9000 || len(m.AccountID) >= 9000 {
		t.Errorf("dead letter's fields were not cut: task_id %d, account_id %d bytes, error %.20q", len(m.TaskID), len(m.AccountID), m.Error)
	}

	dls, total, err = st.DeadLetters(c, 1)
	noErr(t, err, "DeadLetters(limit 1)")
	if total != 2 || len(dls) != 1 || dls[0].TaskID != "t-1" {
		t.Errorf("DeadLetters(limit 1) = %+v of %d, want the newest of 2", dls, total)
	}
}

// The table keeps the newest DeadLettersKept: records refused at request
// rate cannot fill the database's disk.
func testDeadLettersBounded(t *testing.T, st store.Store) {
	c := ctx(t)
	over := 3
	dls := make([]store.DeadLetter, store.DeadLettersKept+over)
	for i := range dls {
		dls[i] = store.DeadLetter{Kind: store.KindTask, TaskID: fmt.Sprintf("t-%05d", i), Error: "refused", Record: "{}"}
	}
	// In batches of 500 at most, as the Writer's are.
	for rest := dls; len(rest) > 0; {
		n := min(len(rest), 500)
		noErr(t, st.WriteDeadLetters(c, rest[:n]), "WriteDeadLetters")
		rest = rest[n:]
	}
	got, total, err := st.DeadLetters(c, store.DeadLettersKept+over)
	noErr(t, err, "DeadLetters")
	if total != store.DeadLettersKept || len(got) != store.DeadLettersKept {
		t.Fatalf("after %d dead letters the table holds %d (%d listed), want %d", len(dls), total, len(got), store.DeadLettersKept)
	}
	if got[0].TaskID != dls[len(dls)-1].TaskID || got[len(got)-1].TaskID != dls[over].TaskID {
		t.Errorf("kept %s .. %s, want the newest: %s .. %s", got[len(got)-1].TaskID, got[0].TaskID, dls[over].TaskID, dls[len(dls)-1].TaskID)
	}
}
