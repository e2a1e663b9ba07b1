package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/store"
)

// The admin API lists keys with their limits and sets them as
// `switchyard keys set-limits` does; the instance applies a change within
// a second (the store's auth change counter), and a bad one is refused
// saying why.
func TestAdminKeyLimits(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.AdminToken = testAdmin })
	key := ta.account(t, "keyed", "")
	other := ta.account(t, "other", "")

	var keys []store.APIKey
	if code, _ := ta.call(t, "GET", "/admin/api/keys", testAdmin, nil, &keys); code != 200 || len(keys) != 2 {
		t.Fatalf("GET /admin/api/keys: %d %+v, want the 2 keys", code, keys)
	}
	var mine store.APIKey
	for _, k := range keys {
		if strings.HasPrefix(key, k.Prefix) {
			mine = k
		}
	}
	if mine.ID == "" || mine.Limits.Use != "" || mine.Limits.TokensPerDay != 0 {
		t.Fatalf("the key %s… is not listed without limits: %+v", key[:11], keys)
	}
	var one []store.APIKey
	if code, _ := ta.call(t, "GET", "/admin/api/keys?account_id="+mine.AccountID, testAdmin, nil, &one); code != 200 || len(one) != 1 || one[0].ID != mine.ID {
		t.Fatalf("GET /admin/api/keys?account_id=: %d %+v, want the one key", code, one)
	}

	request := func(k string) int {
		code, _, _, err := ta.do("POST", "/api/v1/request", k, map[string]any{"task_type": "echo", "content": "x"})
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if code := request(key); code != http.StatusNotFound { // no node serves echo: the key itself may ask
		t.Fatalf("before the limits: %d, want 404 no_node_available", code)
	}
	var set store.APIKey
	if code, _ := ta.call(t, "PUT", "/admin/api/keys/"+mine.Prefix+"/limits", testAdmin,
		map[string]any{"use": "node", "tokens_per_day": 5000, "task_types": []string{"echo", "chat", "echo"}}, &set); code != 200 ||
		set.ID != mine.ID || set.Limits.Use != "node" || set.Limits.TokensPerDay != 5000 || strings.Join(set.Limits.TaskTypes, ",") != "chat,echo" {
		t.Fatalf("PUT limits: %d %+v", code, set)
	}
	waitUntil(t, func() bool { return request(key) == http.StatusForbidden }) // key_scope: a node-only key
	if code := request(other); code != http.StatusNotFound {
		t.Fatalf("the other key after the change: %d, want it unaffected (404 no node)", code)
	}
	if code, _ := ta.call(t, "PUT", "/admin/api/keys/"+mine.ID+"/limits", testAdmin, map[string]any{}, &set); code != 200 || set.Limits.Use != "" {
		t.Fatalf("PUT {} (lift every limit): %d %+v", code, set)
	}
	waitUntil(t, func() bool { return request(key) == http.StatusNotFound })

	var e apiErr
	for _, c := range []struct {
		path string
		body any
		code int
		want string
	}{
		{"/admin/api/keys/" + mine.ID + "/limits", map[string]any{"budget_per_day": -1}, 422, "a limit is negative (0 means none)"},
		{"/admin/api/keys/" + mine.ID + "/limits", map[string]any{"use": "both"}, 422, `use "both" is not node, client or empty`},
		{"/admin/api/keys/" + mine.ID + "/limits", map[string]any{"tokens_per_day": "many"}, 422, "tokens_per_day has the wrong type"},
		{"/admin/api/keys/gn_00000000/limits", map[string]any{}, 404, "no key gn_00000000"},
	} {
		e = apiErr{}
		if code, _ := ta.call(t, "PUT", c.path, testAdmin, c.body, &e); code != c.code || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("PUT %s %v: %d %+v, want %d saying %q", c.path, c.body, code, e, c.code, c.want)
		}
	}
	if code, _ := ta.call(t, "PUT", "/admin/api/keys/"+mine.ID+"/limits", key, map[string]any{}, nil); code != http.StatusUnauthorized {
		t.Errorf("PUT limits with an account's key: %d, want 401", code)
	}
	if code, _ := ta.call(t, "GET", "/admin/api/keys?account_id=nobody", testAdmin, nil, nil); code != http.StatusNotFound {
		t.Errorf("GET keys of an unknown account: %d, want 404", code)
	}
}
