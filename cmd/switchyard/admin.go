package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/server"
	"github.com/switchyard-dev/switchyard/store"
)

// openStore opens the store the admin commands work on: the same one serve
// would use with the same flags.
func openStore(ctx context.Context, sf storeFlags, lf logFlags, stderr io.Writer) (store.Store, error) {
	log, err := lf.logger(stderr)
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, store.Options{DataDir: sf.dataDir, DatabaseURL: sf.databaseURL, Logger: log})
}

func adminFlags(name, summary string, stderr io.Writer) (*flagSet, *storeFlags, *logFlags) {
	fs := newFlagSet(name, summary, stderr)
	sf, lf := &storeFlags{}, &logFlags{}
	sf.register(fs)
	fs.StringVar(&lf.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&lf.level, "log-level", "warn", "log level: debug, info, warn or error")
	return fs, sf, lf
}

func runAccounts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		args = []string{"create", "--help"}
	}
	if len(args) > 0 && args[0] == "delete" {
		return runAccountsDelete(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "create" {
		return fmt.Errorf(`usage: switchyard accounts create --name NAME [--email EMAIL] [--trust community|official] | accounts delete [flags] NAME|ID`)
	}
	fs, sf, lf := adminFlags("accounts create", `Creates an account and its first API key. The key is printed once, alone on
the last line of stdout, so scripts can take it with "| tail -n1".`, stderr)
	name := fs.String("name", "", "the account's unique name (required)")
	email := fs.String("email", "", "a contact address (optional)")
	trust := fs.String("trust", store.TrustCommunity, "trust tier: community or official (official nodes serve requests that demand it)")
	if err := fs.parse(args[1:]); err != nil {
		return err
	}
	if *name == "" {
		return errors.New("--name is required (for example: switchyard accounts create --name alice)")
	}
	st, err := openStore(ctx, *sf, *lf, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	acct, key, err := st.CreateAccount(ctx, *name, *email, *trust)
	switch {
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("an account named %q exists already; add a key to it with: switchyard keys create --account %s", *name, *name)
	case errors.Is(err, store.ErrInvalid) && *trust != store.TrustCommunity && *trust != store.TrustOfficial:
		return fmt.Errorf("--trust %q: use community or official", *trust)
	case errors.Is(err, store.ErrInvalid):
		return errors.New("--name and --email must be UTF-8 text without NUL bytes")
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "account %s created (id %s, trust %s)\n", acct.Name, acct.ID, acct.Trust)
	fmt.Fprintln(stdout, "API key (shown once; store it now):")
	fmt.Fprintln(stdout, key)
	return nil
}

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const use = `usage: switchyard keys create --account NAME|ID | keys list [--account NAME|ID] | keys revoke KEY_ID|PREFIX | keys set-limits [--tokens-per-day N] [--tokens-per-month N] [--budget-per-day N] [--budget-per-month N] [--use node|client] [--task-types a,b] KEY_ID|PREFIX`
	if len(args) == 0 {
		return errors.New(use)
	}
	sub := args[0]
	switch {
	case isHelp(sub):
		// The three subcommands share their flags: show them.
		sub, args = "create|list|revoke|set-limits", []string{sub, "--help"}
	case sub != "create" && sub != "list" && sub != "revoke" && sub != "set-limits":
		return errors.New(use)
	}
	fs, sf, lf := adminFlags("keys "+sub, "Manages API keys. Keys are stored as SHA-256; a new key is printed once, alone on the last line.", stderr)
	account := fs.String("account", "", "the account, by name or id")
	perDay := fs.Int64("tokens-per-day", 0, "set-limits: the tokens (prompt + completion, as the nodes report them) the key may use per UTC day, held across instances within one request (each request holds its content's and params' bytes and its max_tokens, or serve's --quota-completion-estimate, while it runs); 0 for no limit")
	perMonth := fs.Int64("tokens-per-month", 0, "set-limits: the same per UTC calendar month; 0 for no limit")
	budgetDay := fs.Int64("budget-per-day", 0, "set-limits: the spend units the key may use per UTC day, its tasks' tokens at serve's --token-prices (1 unit a token by default); over it: 402; 0 for no limit")
	budgetMonth := fs.Int64("budget-per-month", 0, "set-limits: the same per UTC calendar month; 0 for no limit")
	keyUse := fs.String("use", "", "set-limits: what the key may do: node (connect nodes, read its account's summary), client (send requests, read and cancel its own tasks, see its own usage), or empty for both; a key with a use or --task-types cannot delete its account, rotate the webhook secret or control nodes (docs/PROTOCOL.md, \"Key scopes\")")
	types := fs.String("task-types", "", "set-limits: the task types the key may ask for, or serve as a node (comma-separated); empty for any")
	ev := eventFlags(fs)
	if err := fs.parse(args[1:]); err != nil {
		return err
	}
	// Refuse bad arguments before opening (and perhaps creating) a store.
	switch {
	case sub == "revoke" && fs.NArg() != 1:
		return errors.New("usage: switchyard keys revoke [flags] KEY_ID|PREFIX (flags go before the key; see switchyard keys list)")
	case sub == "set-limits" && fs.NArg() != 1:
		return errors.New("usage: switchyard keys set-limits [--tokens-per-day N] [--tokens-per-month N] [--budget-per-day N] [--budget-per-month N] [--use node|client] [--task-types a,b] KEY_ID|PREFIX (flags go before the key; no flag lifts the limits)")
	case sub == "set-limits" && *keyUse != store.KeyUseAny && *keyUse != store.KeyUseNode && *keyUse != store.KeyUseClient:
		return fmt.Errorf("--use %q: node, client, or empty for both", *keyUse)
	case sub == "set-limits" && (*perDay < 0 || *perMonth < 0 || *budgetDay < 0 || *budgetMonth < 0):
		return errors.New("--tokens-per-day, --tokens-per-month, --budget-per-day and --budget-per-month must be 0 (no limit) or positive")
	case sub == "create" && *account == "":
		return errors.New("--account is required (an account name or id)")
	}
	st, err := openStore(ctx, *sf, *lf, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	switch sub {
	case "create":
		acct, err := findAccount(ctx, st, *account)
		if err != nil {
			return err
		}
		k, key, err := st.CreateKey(ctx, acct.ID)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "key %s created for account %s (shown once; store it now):\n%s\n", k.ID, acct.Name, key)
	case "list":
		id := ""
		if *account != "" {
			acct, err := findAccount(ctx, st, *account)
			if err != nil {
				return err
			}
			id = acct.ID
		}
		keys, err := st.ListKeys(ctx, id)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY ID\tPREFIX\tACCOUNT\tCREATED\tREVOKED\tTOKENS/DAY\tTOKENS/MONTH\tBUDGET/DAY\tBUDGET/MONTH")
		for _, k := range keys {
			revoked := "-"
			if k.RevokedAt != nil {
				revoked = k.RevokedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.AccountID, k.CreatedAt.UTC().Format(time.RFC3339), revoked,
				limitText(k.Limits.TokensPerDay), limitText(k.Limits.TokensPerMonth), limitText(k.Limits.BudgetPerDay), limitText(k.Limits.BudgetPerMonth))
		}
		return tw.Flush()
	case "set-limits":
		var tl stringList
		if *types != "" {
			_ = tl.Set(*types)
		}
		k, err := st.SetKeyLimits(ctx, fs.Arg(0), store.KeyLimits{TokensPerDay: *perDay, TokensPerMonth: *perMonth,
			BudgetPerDay: *budgetDay, BudgetPerMonth: *budgetMonth, Use: *keyUse, TaskTypes: tl})
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("no key %q (see switchyard keys list)", fs.Arg(0))
		} else if err != nil {
			return err
		}
		scope := "nodes and clients"
		if k.Limits.Use != store.KeyUseAny {
			scope = k.Limits.Use + "s only"
		}
		if len(k.Limits.TaskTypes) > 0 {
			scope += ", task types " + strings.Join(k.Limits.TaskTypes, ",")
		}
		fmt.Fprintf(stdout, "key %s: %s tokens per day, %s per month; budget %s units per day, %s per month; %s (running instances apply it within a second; connected nodes keep their registration)\n",
			k.ID, limitText(k.Limits.TokensPerDay), limitText(k.Limits.TokensPerMonth), limitText(k.Limits.BudgetPerDay), limitText(k.Limits.BudgetPerMonth), scope)
	case "revoke":
		// Which key it is (account and prefix) is what instances know of a
		// node's key: find it before it is revoked.
		k, found := findKey(ctx, st, fs.Arg(0))
		if err := st.RevokeKey(ctx, fs.Arg(0)); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("no live key %q (see switchyard keys list)", fs.Arg(0))
		} else if err != nil {
			return err
		}
		if !found {
			fmt.Fprintf(stdout, "key %s revoked (running instances act on it within a second)\n", fs.Arg(0))
			return nil
		}
		fmt.Fprintf(stdout, "key %s revoked; %s\n", fs.Arg(0),
			ev.publish(ctx, server.AuthEvent{Kind: server.AuthKeyRevoked, AccountID: k.AccountID, KeyPrefix: k.Prefix}, stderr))
	default:
		return errors.New(use)
	}
	return nil
}

// limitText shows a limit, 0 as none.
func limitText(n int64) string {
	if n == 0 {
		return "no limit"
	}
	return strconv.FormatInt(n, 10)
}

// runAccountsDelete is "accounts delete NAME|ID": the account and its keys
// go, and its nodes are closed (4003) on every instance.
func runAccountsDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, sf, lf := adminFlags("accounts delete", `Deletes an account and revokes its keys; its nodes are closed (4003) on every
running instance (at once with --redis-url, else within a second: instances
read the database's revocation counter).`, stderr)
	ev := eventFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: switchyard accounts delete [flags] NAME|ID (flags go before the account)")
	}
	st, err := openStore(ctx, *sf, *lf, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	acct, err := findAccount(ctx, st, fs.Arg(0))
	if err != nil {
		return err
	}
	if err := st.DeleteAccount(ctx, acct.ID); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "account %s deleted (id %s); %s\n", acct.Name, acct.ID,
		ev.publish(ctx, server.AuthEvent{Kind: server.AuthAccountDeleted, AccountID: acct.ID}, stderr))
	return nil
}

// findKey finds the key that RevokeKey would take for idOrPrefix (its id,
// prefix, or the whole key).
func findKey(ctx context.Context, st store.Store, idOrPrefix string) (store.APIKey, bool) {
	keys, err := st.ListKeys(ctx, "")
	if err != nil {
		return store.APIKey{}, false
	}
	for _, k := range keys {
		if k.RevokedAt == nil && (k.ID == idOrPrefix || k.Prefix == idOrPrefix ||
			(len(idOrPrefix) > len(k.Prefix) && idOrPrefix[:len(k.Prefix)] == k.Prefix)) {
			return k, true
		}
	}
	return store.APIKey{}, false
}

// authEventFlags say where running instances listen for auth events.
type authEventFlags struct {
	redisURL, namespace *string
	cluster             *bool
}

func eventFlags(fs *flagSet) authEventFlags {
	d := server.DefaultConfig()
	return authEventFlags{
		redisURL:  fs.String("redis-url", d.RedisURL, "the instances' Redis: tell them at once (the auth events channel); empty: they act within a second, from the database"),
		namespace: fs.String("namespace", d.Namespace, "the instances' Redis namespace"),
		cluster:   fs.Bool("redis-cluster", d.RedisCluster, "read --redis-url as a Redis Cluster URL"),
	}
}

// publish tells running instances about ev, and says what happened.
func (f authEventFlags) publish(ctx context.Context, ev server.AuthEvent, stderr io.Writer) string {
	if *f.redisURL == "" {
		return "running instances act on it within a second (pass --redis-url to tell them at once)"
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := bus.DialRedis(pctx, *f.redisURL, *f.cluster)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return "running instances act on it within a second (Redis was unreachable)"
	}
	defer conn.Close()
	n, err := server.PublishAuthEvent(pctx, bus.NewRedisControl(conn.Client(), *f.namespace, *f.cluster), ev)
	if err != nil {
		fmt.Fprintf(stderr, "cannot publish to Redis: %v\n", err)
		return "running instances act on it within a second (Redis was unreachable)"
	}
	return fmt.Sprintf("%d running instance(s) told at once", n)
}

func findAccount(ctx context.Context, st store.Store, nameOrID string) (store.Account, error) {
	if nameOrID == "" {
		return store.Account{}, errors.New("--account is required (an account name or id)")
	}
	acct, err := st.AccountByName(ctx, nameOrID)
	if errors.Is(err, store.ErrNotFound) {
		acct, err = st.Account(ctx, nameOrID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return acct, fmt.Errorf("no account %q (create one with: switchyard accounts create --name %s)", nameOrID, nameOrID)
	}
	return acct, err
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, sf, lf := adminFlags("migrate", "Applies the database migrations that are not applied yet, then exits. serve also does this at boot.", stderr)
	if err := fs.parse(args); err != nil {
		return err
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	applied, err := store.Migrate(ctx, store.Options{DataDir: sf.dataDir, DatabaseURL: sf.databaseURL, Logger: log})
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "the database is up to date")
	}
	for _, m := range applied {
		fmt.Fprintln(stdout, "applied", m)
	}
	return nil
}

func runDeadLetters(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, sf, lf := adminFlags("dead-letters", `Lists the records the database refused (a task record, a node's outcome or
usage report, a suspension), newest first: the history writer set each aside in
the dead_letters table, so that every other record was still written. Each
row's record is its JSON, cut at 4,096 bytes (record_bytes is its length); the
table keeps the newest 10,000.`, stderr)
	limit := fs.Int("limit", 20, "how many to list, newest first")
	asJSON := fs.Bool("json", false, "print them as JSON, records whole as kept")
	if err := fs.parse(args); err != nil {
		return err
	}
	if *limit < 1 {
		return fmt.Errorf("--limit %d: list at least 1", *limit)
	}
	st, err := openStore(ctx, *sf, *lf, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	dls, total, err := st.DeadLetters(ctx, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"total": total, "dead_letters": dls})
	}
	fmt.Fprintf(stdout, "%d dead letters", total)
	if total > int64(len(dls)) {
		fmt.Fprintf(stdout, " (the newest %d below; --limit for more)", len(dls))
	}
	fmt.Fprintln(stdout)
	if len(dls) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAT\tKIND\tTASK\tACCOUNT\tBYTES\tERROR")
	for _, d := range dls {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", d.ID, d.At.UTC().Format(time.RFC3339), shown(d.Kind), shown(d.TaskID),
			shown(d.AccountID), d.RecordBytes, shown(d.Error))
	}
	return tw.Flush()
}

// shown is s for a terminal: "-" when empty, and control characters (a
// database's error may quote the value it refused) as "?", so that nothing
// printed can move the cursor or recolour the screen.
func shown(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", `Prints a running server's status (GET /api/v1/status) and readiness (GET /api/health).
With --admin-token (or SWITCHYARD_ADMIN_TOKEN) it adds what only operators see
(GET /admin/api/status): the instance's id, name, host and address, and the errors
behind an unready instance.`, stderr)
	url := fs.String("url", localURL("http", ""), "the server's base URL")
	asJSON := fs.Bool("json", false, "print the raw JSON of the endpoints")
	token := fs.String("admin-token", "", "the server's --admin-token, to show the operator-only details")
	if err := fs.parse(args); err != nil {
		return err
	}
	base := strings.TrimRight(*url, "/")
	client := &http.Client{Timeout: 5 * time.Second}
	var status, health, admin map[string]any
	if _, err := getJSON(ctx, client, base+"/api/v1/status", "", &status); err != nil {
		return fmt.Errorf("cannot reach %s: %w (is the server running? set --url)", base, err)
	}
	code, err := getJSON(ctx, client, base+"/api/health", "", &health)
	if err != nil {
		return fmt.Errorf("cannot read %s/api/health: %w", base, err)
	}
	if *token != "" {
		acode, err := getJSON(ctx, client, base+"/admin/api/status", *token, &admin)
		switch {
		case acode == http.StatusNotFound:
			return fmt.Errorf("%s has no admin routes: start it with --admin-token", base)
		case err != nil:
			return fmt.Errorf("cannot read %s/admin/api/status: %w", base, err)
		case acode != http.StatusOK:
			return fmt.Errorf("%s/admin/api/status: HTTP %d (is --admin-token the server's?)", base, acode)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		out := map[string]any{"status": status, "health": health}
		if admin != nil {
			out["admin"] = admin
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
		if code != http.StatusOK {
			return errors.New("the server is not ready")
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, k := range []string{"instance_name", "instance_id", "host", "addr"} {
		if v, ok := admin[k]; ok {
			fmt.Fprintf(tw, "%s\t%v\n", k, v)
		}
	}
	for _, k := range []string{"version", "mode", "store", "instances", "online_nodes", "local_nodes", "tasks_in_flight", "total_tasks_today", "uptime_seconds"} {
		if v, ok := status[k]; ok {
			fmt.Fprintf(tw, "%s\t%v\n", k, v)
		}
	}
	for _, k := range []string{"redis_error", "store_error", "cluster_error"} {
		if v, ok := admin[k]; ok {
			fmt.Fprintf(tw, "%s\t%v\n", k, v)
		}
	}
	fmt.Fprintf(tw, "ready\t%v\n", code == http.StatusOK)
	if r, ok := health["reason"]; ok {
		fmt.Fprintf(tw, "reason\t%v\n", r)
	}
	if checks, ok := health["checks"].(map[string]any); ok {
		for k, v := range checks {
			fmt.Fprintf(tw, "check %s\t%v\n", k, v)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if code != http.StatusOK {
		return errors.New("the server is not ready")
	}
	return nil
}

func getJSON(ctx context.Context, c *http.Client, url, bearer string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return resp.StatusCode, fmt.Errorf("not a switchyard answer (HTTP %d): %w", resp.StatusCode, err)
	}
	return resp.StatusCode, nil
}
