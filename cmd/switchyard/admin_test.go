package main

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/store"
)

// Every admin test runs against both stores: the same flags, the same behaviour.
func forEachBackend(t *testing.T, test func(t *testing.T, flags []string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, b.flags(t)) })
	}
}

func TestAccountsCreate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, flags []string) {
		ctx := testCtx(t)
		out := mustCLI(t, slices.Concat([]string{"accounts", "create", "--name", "alice", "--email", "a@example.com"}, flags)...)
		key := lastLine(t, out)
		if !keyRE.MatchString(key) {
			t.Fatalf("the last line %q is not a key alone (gn_ and 32 hex)\n%s", key, out)
		}
		if !strings.Contains(out, "account alice created") || !strings.Contains(out, "trust community") {
			t.Errorf("accounts create printed:\n%s", out)
		}

		st := openFlags(t, flags)
		acct, err := st.Authenticate(ctx, key)
		if err != nil {
			t.Fatalf("Authenticate(the printed key): %v", err)
		}
		if acct.Name != "alice" || acct.Email != "a@example.com" || acct.Trust != store.TrustCommunity {
			t.Errorf("the key authenticates %+v, want alice, a@example.com, community", acct)
		}

		out = mustCLI(t, slices.Concat([]string{"accounts", "create", "--name", "bob", "--trust", "official"}, flags)...)
		if acct, err := st.Authenticate(ctx, lastLine(t, out)); err != nil || acct.Name != "bob" || acct.Trust != store.TrustOfficial {
			t.Errorf("--trust official: the key authenticates %+v, %v; want bob, official", acct, err)
		}

		_, _, err = cli(t, slices.Concat([]string{"accounts", "create", "--name", "alice"}, flags)...)
		wantErr(t, "a duplicate name", err, `"alice" exists already`, "switchyard keys create --account alice")
	})
}

func TestAccountsCreateRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"accounts", "create", "--data-dir", dir}, []string{"--name is required", "switchyard accounts create --name alice"}},
		{[]string{"accounts", "create", "--data-dir", dir, "--name", "carol", "--trust", "gold"}, []string{`--trust "gold"`, "community or official"}},
		{[]string{"accounts", "create", "--data-dir", dir, "--name", "caro\xffl"}, []string{"--name"}},
		{[]string{"accounts", "create", "--data-dir", dir, "--name", "dave", "--email", "d\xff@example.com"}, []string{"--email"}},
		{[]string{"accounts", "create", "--data-dir", dir, "--name", "dave", "--log-level", "loud"}, []string{"--log-level"}},
		{[]string{"accounts", "rename", "--name", "dave"}, []string{"usage: switchyard accounts create --name NAME"}},
		{[]string{"accounts", "delete", "--data-dir", dir}, []string{"usage: switchyard accounts delete [flags] NAME|ID"}},
		{[]string{"accounts"}, []string{"usage: switchyard accounts create --name NAME"}},
	} {
		stdout, _, err := cli(t, tc.args...)
		wantErr(t, strings.Join(tc.args, " "), err, tc.want...)
		if keyRE.MatchString(strings.TrimSpace(stdout)) {
			t.Errorf("%q printed a key although it failed", tc.args)
		}
	}
	// None of these made an account.
	keys, err := openFlags(t, []string{"--data-dir", dir}).ListKeys(testCtx(t), "")
	if err != nil || len(keys) != 0 {
		t.Errorf("after refused creations: %d keys, %v; want none", len(keys), err)
	}
}

func TestAccountsCreateFromEnvironment(t *testing.T) {
	envDir, flagDir := t.TempDir(), t.TempDir()
	t.Setenv("SWITCHYARD_DATA_DIR", envDir)
	t.Setenv("SWITCHYARD_TRUST", "official")
	ctx := testCtx(t)

	key := lastLine(t, mustCLI(t, "accounts", "create", "--name", "erin"))
	acct, err := openFlags(t, []string{"--data-dir", envDir}).Authenticate(ctx, key)
	if err != nil || acct.Name != "erin" || acct.Trust != store.TrustOfficial {
		t.Errorf("with SWITCHYARD_DATA_DIR and SWITCHYARD_TRUST: the key authenticates %+v, %v in the env's store; want erin, official", acct, err)
	}

	// A flag on the command line wins over the environment.
	key = lastLine(t, mustCLI(t, "accounts", "create", "--name", "frank", "--data-dir", flagDir, "--trust", "community"))
	acct, err = openFlags(t, []string{"--data-dir", flagDir}).Authenticate(ctx, key)
	if err != nil || acct.Trust != store.TrustCommunity {
		t.Errorf("--data-dir and --trust given: the key authenticates %+v, %v in the flag's store; want frank, community", acct, err)
	}

	t.Setenv("SWITCHYARD_LOG_LEVEL", "loud")
	_, _, err = cli(t, "accounts", "create", "--name", "gina")
	wantErr(t, "a bad SWITCHYARD_LOG_LEVEL", err, "loud")
}

// keyIDRE finds the key id in what keys create prints.
var keyIDRE = regexp.MustCompile(`\bkey (key_[0-9a-f]{12}) created for account hana\b`)

func TestKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, flags []string) {
		ctx := testCtx(t)
		// keys runs "keys SUB FLAGS... ARGS...": flags stop at the first argument.
		keys := func(sub string, args ...string) string {
			return mustCLI(t, slices.Concat([]string{"keys", sub}, flags, args)...)
		}
		first := lastLine(t, mustCLI(t, slices.Concat([]string{"accounts", "create", "--name", "hana"}, flags)...))

		out := keys("create", "--account", "hana")
		second := lastLine(t, out)
		if !keyRE.MatchString(second) || second == first {
			t.Fatalf("keys create: the last line %q is not a new key\n%s", second, out)
		}
		m := keyIDRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("keys create does not name the key id:\n%s", out)
		}
		secondID := m[1]
		st := openFlags(t, flags)
		acct, err := st.Authenticate(ctx, second)
		if err != nil || acct.Name != "hana" {
			t.Fatalf("Authenticate(the new key) = %+v, %v; want hana", acct, err)
		}

		// By id as well as by name.
		third := lastLine(t, keys("create", "--account", acct.ID))
		if got, err := st.Authenticate(ctx, third); err != nil || got.ID != acct.ID {
			t.Errorf("keys create --account ID: the key authenticates %+v, %v", got, err)
		}

		list := keys("list", "--account", "hana")
		for _, k := range []string{first, second, third} {
			if !strings.Contains(list, k[:11]) {
				t.Errorf("keys list lacks the prefix %s:\n%s", k[:11], list)
			}
			if strings.Contains(list, k) {
				t.Errorf("keys list shows a whole key:\n%s", list)
			}
		}
		if !strings.Contains(list, secondID) || !strings.HasPrefix(list, "KEY ID") {
			t.Errorf("keys list lacks the header or the id %s:\n%s", secondID, list)
		}

		out = keys("revoke", secondID)
		if !strings.Contains(out, secondID+" revoked") {
			t.Errorf("keys revoke printed %q", out)
		}
		if _, err := st.Authenticate(ctx, second); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Authenticate(a revoked key) = %v, want ErrNotFound", err)
		}
		if _, err := st.Authenticate(ctx, first); err != nil {
			t.Errorf("revoking one key broke another: %v", err)
		}
		// The revoked key's row now shows when.
		for _, line := range strings.Split(keys("list", "--account", "hana"), "\n") {
			if strings.HasPrefix(line, secondID) && strings.HasSuffix(strings.TrimSpace(line), " -") {
				t.Errorf("keys list shows the revoked key as live: %q", line)
			}
		}

		// By prefix.
		keys("revoke", third[:11])
		if _, err := st.Authenticate(ctx, third); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Authenticate(a key revoked by prefix) = %v, want ErrNotFound", err)
		}

		_, _, err = cli(t, slices.Concat([]string{"keys", "revoke"}, flags, []string{"key_000000000000"})...)
		wantErr(t, "revoking an unknown key", err, `no live key "key_000000000000"`, "keys list")
		_, _, err = cli(t, slices.Concat([]string{"keys", "create", "--account", "nobody"}, flags)...)
		wantErr(t, "keys create for an unknown account", err, `no account "nobody"`, "accounts create --name nobody")
		_, _, err = cli(t, slices.Concat([]string{"keys", "list", "--account", "nobody"}, flags)...)
		wantErr(t, "keys list for an unknown account", err, `no account "nobody"`)
	})
}

func TestKeysRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"keys"}, "usage: switchyard keys create"},
		{[]string{"keys", "rotate", "--data-dir", dir}, "usage: switchyard keys create"},
		{[]string{"keys", "create", "--data-dir", dir}, "--account is required"},
		{[]string{"keys", "revoke", "--data-dir", dir}, "usage: switchyard keys revoke [flags] KEY_ID"},
		{[]string{"keys", "revoke", "--data-dir", dir, "a", "b"}, "usage: switchyard keys revoke [flags] KEY_ID"},
		{[]string{"keys", "revoke", "key_1", "--data-dir", dir}, "flags go before the key"},
		{[]string{"keys", "list", "--data-dir", dir, "--bogus"}, "bogus"},
	} {
		_, _, err := cli(t, tc.args...)
		wantErr(t, strings.Join(tc.args, " "), err, tc.want)
	}
	// A command refused for its arguments does not create a store.
	for _, tc := range [][]string{{"keys", "rotate"}, {"keys", "revoke"}, {"keys", "revoke", "key_1", "--data-dir", dir}} {
		t.Run(strings.Join(tc, "_"), func(t *testing.T) {
			t.Chdir(t.TempDir())
			if _, _, err := cli(t, tc...); err == nil {
				t.Fatalf("switchyard %q succeeded", tc)
			}
			if _, err := os.Stat("data"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("switchyard %q created ./data (%v) although it was refused", tc, err)
			}
		})
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused key commands created %s (%v)", dir, err)
	}
}

func TestMigrate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, flags []string) {
		out := mustCLI(t, slices.Concat([]string{"migrate"}, flags)...)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		for _, l := range lines {
			if !strings.HasPrefix(l, "applied ") || len(l) <= len("applied ") {
				t.Errorf("migrate on a fresh database printed %q, want only lines \"applied …\"", out)
				break
			}
		}
		if out = mustCLI(t, slices.Concat([]string{"migrate"}, flags)...); out != "the database is up to date\n" {
			t.Errorf("the second migrate printed %q, want \"the database is up to date\"", out)
		}
		// The migrated database is what the other commands use.
		key := lastLine(t, mustCLI(t, slices.Concat([]string{"accounts", "create", "--name", "ivan"}, flags)...))
		if _, err := openFlags(t, flags).Authenticate(testCtx(t), key); err != nil {
			t.Errorf("after migrate: %v", err)
		}
	})
}

func TestMigrateRefusesBadDatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	_, stderr, err := cli(t, "migrate", "--database-url", "postgres://u:sekrit@"+closed+"/db?sslmode=disable")
	wantErr(t, "migrate against a closed port", err, "--database-url")
	if strings.Contains(err.Error()+stderr, "sekrit") {
		t.Errorf("the password appears in the error or the log: %v\n%s", err, stderr)
	}
	_, _, err = cli(t, "migrate", "--database-url", "mysql://root:sekrit@localhost/db")
	wantErr(t, "migrate with mysql://", err, "--database-url", `"mysql"`)
	if err != nil && strings.Contains(err.Error(), "sekrit") {
		t.Errorf("the password appears in the error: %v", err)
	}
	_, _, err = cli(t, "migrate", "--data-dir", t.TempDir(), "--log-format", "xml")
	wantErr(t, "migrate --log-format xml", err, "--log-format")
}

// A server that answers the status endpoints like switchyard does while
// draining.
func notReadyServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/status":
			json.NewEncoder(w).Encode(map[string]any{"status": "running", "online_nodes": 0, "ready": false})
		case "/api/health":
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(map[string]any{"status": "not_ready", "reason": "draining", "checks": map[string]string{"store": "ok"}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestStatusNotReady(t *testing.T) {
	base := notReadyServer(t)
	out, _, err := cli(t, "status", "--url", base)
	wantErr(t, "status of a draining server", err, "not ready")
	if !regexp.MustCompile(`(?m)^ready\s+false$`).MatchString(out) || !regexp.MustCompile(`(?m)^reason\s+draining$`).MatchString(out) {
		t.Errorf("status of a draining server printed:\n%s", out)
	}
	// README: status "exits 1 if not ready", with --json too.
	out, _, err = cli(t, "status", "--json", "--url", base+"/")
	wantErr(t, "status --json of a draining server", err, "not ready")
	var got map[string]map[string]any
	if jerr := json.Unmarshal([]byte(out), &got); jerr != nil || got["health"]["reason"] != "draining" {
		t.Errorf("status --json of a draining server printed %q (%v)", out, jerr)
	}
}

func TestStatusUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	_, _, err = cli(t, "status", "--url", closed)
	wantErr(t, "status against a closed port", err, "cannot reach "+closed, "--url")

	// Something that is not switchyard.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>")) }))
	defer srv.Close()
	_, _, err = cli(t, "status", "--url", srv.URL)
	wantErr(t, "status against a web page", err, "not a switchyard answer", "--url")

	t.Setenv("SWITCHYARD_URL", closed)
	_, _, err = cli(t, "status")
	wantErr(t, "status with SWITCHYARD_URL", err, "cannot reach "+closed)
}

func TestKeysSetLimits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, flags []string) {
		ctx := testCtx(t)
		key := lastLine(t, mustCLI(t, slices.Concat([]string{"accounts", "create", "--name", "lim"}, flags)...))
		st := openFlags(t, flags)
		acct, err := st.Authenticate(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		out := mustCLI(t, slices.Concat([]string{"keys", "set-limits"}, flags, []string{"--tokens-per-day", "10000", "--budget-per-month", "500", "--use", "client", "--task-types", "embed,chat", acct.KeyID})...)
		if !strings.Contains(out, "10000 tokens per day, no limit per month; budget no limit units per day, 500 per month; clients only, task types chat,embed") {
			t.Errorf("keys set-limits printed:\n%s", out)
		}
		if acct, err := st.Authenticate(ctx, key); err != nil || !acct.KeyLimits.Equal(store.KeyLimits{TokensPerDay: 10000, BudgetPerMonth: 500, Use: "client", TaskTypes: []string{"chat", "embed"}}) {
			t.Errorf("the key's limits are %+v (%v), want 10000 a day", acct.KeyLimits, err)
		}
		out = mustCLI(t, slices.Concat([]string{"keys", "list"}, flags)...)
		if !regexp.MustCompile(acct.KeyID + `\s.*\s10000\s+no limit\s+no limit\s+500\n`).MatchString(out) {
			t.Errorf("keys list shows no limits for %s:\n%s", acct.KeyID, out)
		}
		_, _, err = cli(t, slices.Concat([]string{"keys", "set-limits"}, flags, []string{"--tokens-per-month", "-1", acct.KeyID})...)
		wantErr(t, "a negative limit", err, "must be 0 (no limit) or positive")
		_, _, err = cli(t, slices.Concat([]string{"keys", "set-limits"}, flags, []string{"--use", "both", acct.KeyID})...)
		wantErr(t, "an unknown use", err, "node, client, or empty")
		_, _, err = cli(t, slices.Concat([]string{"keys", "set-limits"}, flags, []string{"key_000000000000"})...)
		wantErr(t, "an unknown key", err, `no key "key_000000000000"`, "switchyard keys list")
		// No flag lifts them.
		mustCLI(t, slices.Concat([]string{"keys", "set-limits"}, flags, []string{acct.KeyID})...)
		if acct, _ := st.Authenticate(ctx, key); acct.KeyLimits.Any() {
			t.Errorf("limits %+v after set-limits without flags", acct.KeyLimits)
		}
	})
}

// dead-letters lists what the history writer set aside, newest first, with
// nothing in it that a terminal would act on.
func TestDeadLetters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, flags []string) {
		out := mustCLI(t, slices.Concat([]string{"dead-letters"}, flags)...)
		if strings.TrimSpace(out) != "0 dead letters" {
			t.Errorf("dead-letters of an empty store printed:\n%s", out)
		}
		st := openFlags(t, flags)
		if err := st.WriteDeadLetters(testCtx(t), []store.DeadLetter{
			{Kind: store.KindUsage, TaskID: "t-old", AccountID: "acct-1", Error: "older", Record: "{}"},
			{Kind: store.KindTask, TaskID: "t-new", AccountID: "acct-2", Error: "index row requires 9080 bytes \x1b[31m(SQLSTATE 54000)",
				Record: `{"task_id":"t-new"}`},
		}); err != nil {
			t.Fatal(err)
		}
		out = mustCLI(t, slices.Concat([]string{"dead-letters", "--limit", "1"}, flags)...)
		if !strings.Contains(out, "2 dead letters (the newest 1 below") || !strings.Contains(out, "t-new") ||
			!strings.Contains(out, "acct-2") || !strings.Contains(out, "index row requires 9080 bytes") || strings.Contains(out, "t-old") {
			t.Errorf("dead-letters --limit 1 printed:\n%s", out)
		}
		if strings.ContainsRune(out, 0x1b) {
			t.Errorf("dead-letters printed an escape character:\n%q", out)
		}
		out = mustCLI(t, slices.Concat([]string{"dead-letters", "--json"}, flags)...)
		var got struct {
			Total       int64              `json:"total"`
			DeadLetters []store.DeadLetter `json:"dead_letters"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("--json printed %q: %v", out, err)
		}
		if got.Total != 2 || len(got.DeadLetters) != 2 || got.DeadLetters[0].Record != `{"task_id":"t-new"}` {
			t.Errorf("--json printed %+v", got)
		}
		_, _, err := cli(t, slices.Concat([]string{"dead-letters", "--limit", "0"}, flags)...)
		wantErr(t, "--limit 0", err, "--limit 0")
	})
}
