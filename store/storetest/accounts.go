package storetest

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/switchyard-dev/switchyard/store"
)

var (
	keyShape   = regexp.MustCompile(`^gn_[0-9a-f]{32}$`)
	keyIDShape = regexp.MustCompile(`^key_[0-9a-f]{12}$`)
)

func testCreateAccount(t *testing.T, st store.Store) {
	c := ctx(t)
	before := norm(time.Now()).Add(-time.Millisecond)
	a, key, err := st.CreateAccount(c, "alice", "alice@example.com", "")
	noErr(t, err, "CreateAccount")
	if _, err := uuid.Parse(a.ID); err != nil {
		t.Errorf("account id %q is not a UUID: %v", a.ID, err)
	}
	if a.Name != "alice" || a.Email != "alice@example.com" || a.Trust != store.TrustCommunity {
		t.Errorf("account = %+v, want alice, alice@example.com, trust community (the default)", a)
	}
	if a.CreatedAt.Before(before) || a.CreatedAt.After(time.Now()) {
		t.Errorf("CreatedAt %v is not about now", a.CreatedAt)
	}
	if !keyShape.MatchString(key) {
		t.Errorf("key %q is not gn_ + 32 lowercase hex", key)
	}

	got, err := st.Account(c, a.ID)
	noErr(t, err, "Account")
	if !sameAccount(got, a) {
		t.Errorf("Account = %+v, want %+v", got, a)
	}
	got, err = st.AccountByName(c, "alice")
	noErr(t, err, "AccountByName")
	if !sameAccount(got, a) {
		t.Errorf("AccountByName = %+v, want %+v", got, a)
	}
	got, err = st.Authenticate(c, key)
	noErr(t, err, "Authenticate with the first key")
	if !sameAccount(got, a) {
		t.Errorf("Authenticate = %+v, want %+v", got, a)
	}

	off, _, err := st.CreateAccount(c, "bob", "", store.TrustOfficial)
	noErr(t, err, "CreateAccount official")
	if off.Trust != store.TrustOfficial || off.Email != "" {
		t.Errorf("official account = %+v", off)
	}
	if off.ID == a.ID {
		t.Error("two accounts share an id")
	}
}

func testCreateAccountInvalid(t *testing.T, st store.Store) {
	c := ctx(t)
	for _, tc := range []struct{ name, email, trust string }{
		{"a", "", "admin"},
		{"b", "", "Official"},
		{"", "", ""},
		{"nul\x00name", "", ""},
		{"c", "bad\xffemail", ""},
	} {
		_, _, err := st.CreateAccount(c, tc.name, tc.email, tc.trust)
		isErr(t, err, store.ErrInvalid, "CreateAccount("+tc.name+", "+tc.trust+")")
	}
	// A refused account leaves nothing behind.
	_, err := st.AccountByName(c, "a")
	isErr(t, err, store.ErrNotFound, "AccountByName of a refused account")
}

func testAccountNameTaken(t *testing.T, st store.Store) {
	c := ctx(t)
	first, _ := newAccount(t, st, "carol")
	_, _, err := st.CreateAccount(c, "carol", "other@example.com", "")
	isErr(t, err, store.ErrConflict, "second account named carol")
	got, err := st.AccountByName(c, "carol")
	noErr(t, err, "AccountByName")
	if got.ID != first.ID {
		t.Errorf("AccountByName returned %s, want the first account %s", got.ID, first.ID)
	}
	keys, err := st.ListKeys(c, "")
	noErr(t, err, "ListKeys")
	if len(keys) != 1 {
		t.Errorf("the refused account left keys behind: %d keys, want 1", len(keys))
	}
}

func testAccountNotFound(t *testing.T, st store.Store) {
	c := ctx(t)
	_, err := st.Account(c, uuid.NewString())
	isErr(t, err, store.ErrNotFound, "Account(unknown)")
	_, err = st.AccountByName(c, "nobody")
	isErr(t, err, store.ErrNotFound, "AccountByName(unknown)")
	isErr(t, st.DeleteAccount(c, uuid.NewString()), store.ErrNotFound, "DeleteAccount(unknown)")
}

func testDeleteAccount(t *testing.T, st store.Store) {
	c := ctx(t)
	a, key := newAccount(t, st, "dave")
	_, key2, err := st.CreateKey(c, a.ID)
	noErr(t, err, "CreateKey")
	other, otherKey := newAccount(t, st, "erin")

	noErr(t, st.DeleteAccount(c, a.ID), "DeleteAccount")

	_, err = st.Account(c, a.ID)
	isErr(t, err, store.ErrNotFound, "Account after delete")
	_, err = st.AccountByName(c, "dave")
	isErr(t, err, store.ErrNotFound, "AccountByName after delete")
	for _, k := range []string{key, key2} {
		_, err = st.Authenticate(c, k)
		isErr(t, err, store.ErrNotFound, "Authenticate with a deleted account's key")
	}
	_, _, err = st.CreateKey(c, a.ID)
	isErr(t, err, store.ErrNotFound, "CreateKey for a deleted account")
	_, err = st.ListKeys(c, a.ID)
	isErr(t, err, store.ErrNotFound, "ListKeys of a deleted account")
	isErr(t, st.DeleteAccount(c, a.ID), store.ErrNotFound, "DeleteAccount twice")

	// Others are untouched, and the name is free again.
	got, err := st.Authenticate(c, otherKey)
	noErr(t, err, "Authenticate another account")
	if got.ID != other.ID {
		t.Errorf("Authenticate = %s, want %s", got.ID, other.ID)
	}
	keys, err := st.ListKeys(c, "")
	noErr(t, err, "ListKeys all")
	for _, k := range keys {
		if k.AccountID == a.ID {
			t.Errorf("ListKeys(\"\") lists key %s of the deleted account", k.ID)
		}
	}
	again, _ := newAccount(t, st, "dave")
	if again.ID == a.ID {
		t.Error("a new account reused the deleted account's id")
	}
}

func testCreateKey(t *testing.T, st store.Store) {
	c := ctx(t)
	a, first := newAccount(t, st, "frank")
	k, key, err := st.CreateKey(c, a.ID)
	noErr(t, err, "CreateKey")
	if !keyShape.MatchString(key) {
		t.Errorf("key %q is not gn_ + 32 lowercase hex", key)
	}
	if !keyIDShape.MatchString(k.ID) {
		t.Errorf("key id %q is not key_ + 12 hex", k.ID)
	}
	if k.Prefix != key[:11] || k.AccountID != a.ID || k.RevokedAt != nil || k.CreatedAt.IsZero() {
		t.Errorf("APIKey = %+v, want prefix %s, account %s, not revoked", k, key[:11], a.ID)
	}
	if key == first {
		t.Error("CreateKey returned the account's first key again")
	}
	for _, kk := range []string{first, key} {
		got, err := st.Authenticate(c, kk)
		noErr(t, err, "Authenticate")
		if got.ID != a.ID {
			t.Errorf("key authenticates account %s, want %s", got.ID, a.ID)
		}
	}
	_, _, err = st.CreateKey(c, uuid.NewString())
	isErr(t, err, store.ErrNotFound, "CreateKey for an unknown account")
}

func testListKeys(t *testing.T, st store.Store) {
	c := ctx(t)
	a, keyA := newAccount(t, st, "grace")
	kA2, keyA2, err := st.CreateKey(c, a.ID)
	noErr(t, err, "CreateKey")
	b, _ := newAccount(t, st, "heidi")

	keys, err := st.ListKeys(c, a.ID)
	noErr(t, err, "ListKeys(a)")
	if len(keys) != 2 {
		t.Fatalf("ListKeys(a) = %d keys, want 2", len(keys))
	}
	prefixes := map[string]bool{keys[0].Prefix: true, keys[1].Prefix: true}
	if !prefixes[keyA[:11]] || !prefixes[keyA2[:11]] {
		t.Errorf("ListKeys(a) prefixes %v, want %s and %s", prefixes, keyA[:11], keyA2[:11])
	}
	found := false
	for _, k := range keys {
		if k.AccountID != a.ID {
			t.Errorf("ListKeys(a) returned a key of %s", k.AccountID)
		}
		if k.ID == kA2.ID {
			found = true
			if k.Prefix != kA2.Prefix || !k.CreatedAt.Equal(kA2.CreatedAt) || k.RevokedAt != nil {
				t.Errorf("listed key %+v differs from created %+v", k, kA2)
			}
		}
	}
	if !found {
		t.Errorf("ListKeys(a) misses key %s", kA2.ID)
	}

	all, err := st.ListKeys(c, "")
	noErr(t, err, "ListKeys all")
	owners := map[string]int{}
	for _, k := range all {
		owners[k.AccountID]++
	}
	if owners[a.ID] != 2 || owners[b.ID] != 1 || len(all) != 3 {
		t.Errorf("ListKeys(\"\") owners = %v, want 2 for a and 1 for b", owners)
	}

	// The plain key is never part of what is stored or listed.
	js, _ := json.Marshal(all)
	for _, k := range []string{keyA, keyA2} {
		if strings.Contains(string(js), k) || strings.Contains(string(js), k[11:]) {
			t.Error("ListKeys exposes a key beyond its prefix")
		}
	}

	_, err = st.ListKeys(c, uuid.NewString())
	isErr(t, err, store.ErrNotFound, "ListKeys(unknown account)")
}

func testRevokeKey(t *testing.T, st store.Store) {
	c := ctx(t)
	a, key1 := newAccount(t, st, "ivan")
	k2, key2, err := st.CreateKey(c, a.ID)
	noErr(t, err, "CreateKey 2")
	_, key3, err := st.CreateKey(c, a.ID)
	noErr(t, err, "CreateKey 3")

	// By id.
	noErr(t, st.RevokeKey(c, k2.ID), "RevokeKey by id")
	_, err = st.Authenticate(c, key2)
	isErr(t, err, store.ErrNotFound, "Authenticate with a revoked key")
	_, err = st.Authenticate(c, key1)
	noErr(t, err, "another key of the account still works")

	keys, err := st.ListKeys(c, a.ID)
	noErr(t, err, "ListKeys")
	var revokedAt *time.Time
	for _, k := range keys {
		if (k.ID == k2.ID) != (k.RevokedAt != nil) {
			t.Errorf("key %s RevokedAt = %v", k.ID, k.RevokedAt)
		}
		if k.ID == k2.ID {
			revokedAt = k.RevokedAt
		}
	}
	// Again: a no-op that keeps the first time.
	noErr(t, st.RevokeKey(c, k2.ID), "RevokeKey twice")
	keys, _ = st.ListKeys(c, a.ID)
	for _, k := range keys {
		if k.ID == k2.ID && (k.RevokedAt == nil || revokedAt == nil || !k.RevokedAt.Equal(*revokedAt)) {
			t.Errorf("revoking twice moved RevokedAt from %v to %v", revokedAt, k.RevokedAt)
		}
	}

	// By prefix, and by the whole key.
	noErr(t, st.RevokeKey(c, key1[:11]), "RevokeKey by prefix")
	_, err = st.Authenticate(c, key1)
	isErr(t, err, store.ErrNotFound, "Authenticate after revoke by prefix")
	noErr(t, st.RevokeKey(c, key3), "RevokeKey by the whole key")
	_, err = st.Authenticate(c, key3)
	isErr(t, err, store.ErrNotFound, "Authenticate after revoke by key")

	isErr(t, st.RevokeKey(c, "key_000000000000"), store.ErrNotFound, "RevokeKey(unknown id)")
	isErr(t, st.RevokeKey(c, "gn_00000000"), store.ErrNotFound, "RevokeKey(unknown prefix)")
	isErr(t, st.RevokeKey(c, ""), store.ErrInvalid, "RevokeKey(\"\")")
}

// AuthSeq grows with each key that stops working (revoked, or its account
// deleted), and with nothing else.
func testAuthSeq(t *testing.T, st store.Store) {
	c := ctx(t)
	seq := func(what string) int64 {
		t.Helper()
		n, err := st.AuthSeq(c)
		noErr(t, err, "AuthSeq after "+what)
		return n
	}
	last := seq("opening")
	same := func(what string) {
		t.Helper()
		if n := seq(what); n != last {
			t.Errorf("AuthSeq moved from %d to %d after %s, which stops no key", last, n, what)
		}
	}
	grew := func(what string) {
		t.Helper()
		n := seq(what)
		if n <= last {
			t.Errorf("AuthSeq is %d after %s, was %d: it must grow", n, what, last)
		}
		last = n
	}
	a, _ := newAccount(t, st, "kim")
	k, _, err := st.CreateKey(c, a.ID)
	noErr(t, err, "CreateKey")
	same("creating an account and a key")
	noErr(t, st.RevokeKey(c, k.ID), "RevokeKey")
	grew("revoking a key")
	noErr(t, st.RevokeKey(c, k.ID), "RevokeKey again")
	same("revoking a revoked key")
	isErr(t, st.RevokeKey(c, "key_000000000000"), store.ErrNotFound, "RevokeKey(unknown id)")
	same("revoking an unknown key")
	noErr(t, st.DeleteAccount(c, a.ID), "DeleteAccount")
	grew("deleting an account")
}

func testAuthenticate(t *testing.T, st store.Store) {
	c := ctx(t)
	a, key := newAccount(t, st, "judy")
	got, err := st.Authenticate(c, key)
	noErr(t, err, "Authenticate")
	if got.ID != a.ID {
		t.Fatalf("Authenticate = %s, want %s", got.ID, a.ID)
	}
	keys, err := st.ListKeys(c, a.ID)
	noErr(t, err, "ListKeys")
	if len(keys) != 1 || got.KeyID != keys[0].ID {
		t.Errorf("Authenticate's KeyID = %q, want the account's key %+v", got.KeyID, keys)
	}
	second, key2, err := st.CreateKey(c, a.ID)
	noErr(t, err, "CreateKey")
	if got, err := st.Authenticate(c, key2); err != nil || got.ID != a.ID || got.KeyID != second.ID {
		t.Errorf("Authenticate(second key) = %+v, %v; want account %s, key %s", got, err, a.ID, second.ID)
	}
	for _, bad := range []string{
		"",
		"gn_",
		key[:len(key)-1],
		key + "0",
		strings.ToUpper(key[:3]) + key[3:],
		"gn_" + strings.ToUpper(key[3:]),
		"gn_00000000000000000000000000000000",
		key[:11], // the prefix is not a key
	} {
		_, err := st.Authenticate(c, bad)
		isErr(t, err, store.ErrNotFound, "Authenticate("+bad+")")
	}
}

func sameAccount(a, b store.Account) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Email == b.Email && a.Trust == b.Trust && a.CreatedAt.Equal(b.CreatedAt)
}

func testSetKeyLimits(t *testing.T, st store.Store) {
	c := ctx(t)
	a, key1 := newAccount(t, st, "limited")
	k2, key2, err := st.CreateKey(c, a.ID)
	noErr(t, err, "CreateKey")
	seq, err := st.AuthSeq(c)
	noErr(t, err, "AuthSeq")

	want := store.KeyLimits{TokensPerDay: 10_000, TokensPerMonth: 200_000, BudgetPerDay: 7, BudgetPerMonth: 90,
		Use: store.KeyUseClient, TaskTypes: []string{"chat", "embed"}}
	got, err := st.SetKeyLimits(c, k2.Prefix, store.KeyLimits{TokensPerDay: 10_000, TokensPerMonth: 200_000, BudgetPerDay: 7,
		BudgetPerMonth: 90, Use: store.KeyUseClient, TaskTypes: []string{"embed", "chat", "embed"}}) // put in order, each once
	noErr(t, err, "SetKeyLimits by prefix")
	if got.ID != k2.ID || !got.Limits.Equal(want) {
		t.Errorf("SetKeyLimits = %+v, want key %s with %+v", got, k2.ID, want)
	}
	if now, _ := st.AuthSeq(c); now <= seq {
		t.Errorf("AuthSeq %d after SetKeyLimits, want more than %d", now, seq)
	}
	acct, err := st.Authenticate(c, key2)
	noErr(t, err, "Authenticate")
	if !acct.KeyLimits.Equal(want) {
		t.Errorf("Authenticate's KeyLimits = %+v, want %+v", acct.KeyLimits, want)
	}
	acct, err = st.Authenticate(c, key1)
	noErr(t, err, "Authenticate")
	if acct.KeyLimits.Any() {
		t.Errorf("the other key has limits %+v, want none", acct.KeyLimits)
	}
	keys, err := st.ListKeys(c, a.ID)
	noErr(t, err, "ListKeys")
	for _, k := range keys {
		if (k.ID == k2.ID) != k.Limits.Equal(want) {
			t.Errorf("listed key %s has limits %+v", k.ID, k.Limits)
		}
	}
	// By id, back to none.
	got, err = st.SetKeyLimits(c, k2.ID, store.KeyLimits{})
	noErr(t, err, "SetKeyLimits by id")
	if acct, _ := st.Authenticate(c, key2); !got.Limits.Equal(store.KeyLimits{}) || !acct.KeyLimits.Equal(store.KeyLimits{}) {
		t.Errorf("limits %+v / %+v after clearing them", got.Limits, acct.KeyLimits)
	}

	_, err = st.SetKeyLimits(c, k2.ID, store.KeyLimits{TokensPerDay: -1})
	isErr(t, err, store.ErrInvalid, "a negative limit")
	_, err = st.SetKeyLimits(c, k2.ID, store.KeyLimits{BudgetPerMonth: -1})
	isErr(t, err, store.ErrInvalid, "a negative budget")
	_, err = st.SetKeyLimits(c, k2.ID, store.KeyLimits{Use: "both"})
	isErr(t, err, store.ErrInvalid, "an unknown use")
	for _, bad := range []string{"", "a,b", "a b", strings.Repeat("x", 65)} {
		_, err = st.SetKeyLimits(c, k2.ID, store.KeyLimits{TaskTypes: []string{bad}})
		isErr(t, err, store.ErrInvalid, "task type "+bad)
	}
	_, err = st.SetKeyLimits(c, "", want)
	isErr(t, err, store.ErrInvalid, "no key named")
	_, err = st.SetKeyLimits(c, "key_000000000000", want)
	isErr(t, err, store.ErrNotFound, "an unknown key")
}
