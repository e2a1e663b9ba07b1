package server

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/store"
)

// Key scopes: which key may use which route, in one table (scopeTable).
// A key's use and task types (switchyard keys set-limits --use,
// --task-types) make it scoped:
//
//   - a node key (--use node) is what a worker machine holds: it connects
//     nodes and reads its account's summary, and nothing else — no
//     requests, no tasks, no usage, no account management;
//   - a client key (--use client) sends requests (of its task types) and
//     reads and cancels its own tasks and its own usage, not those of the
//     account's other keys;
//   - a key with task types and no use is both, within its task types;
//   - an unrestricted key (neither) may do all of that for every key of
//     its account, and manage the account: delete it, rotate its webhook
//     secret, pause, resume or drain its nodes.
//
// requireAccount applies the table to every route it guards as soon as it
// has found the key, so a refused key costs no more than its lookup on a
// route that authenticates before reading its body: a route with no row
// refuses every key, and TestKeyScopesOnEveryRoute fails for it.
// The own-key rule of the reads is the handlers' (readsKey), as only they
// know whose a task is.

// scope is who may use a route.
type scope uint8

const (
	scopeNone   scope = iota // no row: refused to every key
	scopePublic              // no key needed; one sent is not looked at
	scopeAdmin               // the admin token (requireAdmin), never a key
	// scopeNodeSocket: the key comes in node_register, where nodeAuth
	// refuses a client key (close 4001) and the task types bound the
	// capabilities.
	scopeNodeSocket
	scopeAnyKey    // any valid key of the account
	scopeClient    // a key that may send requests: not a node key
	scopeClientOwn // as scopeClient; a scoped key reads only what it asked for (readsKey)
	scopeAccount   // an unrestricted key
	// scopeAccountOrAdmin: an unrestricted key, or the admin token
	// (adminOrAccount lets the token in without a key).
	scopeAccountOrAdmin
)

// scopeRow is one route as echo registers it (a GET row covers its HEAD:
// see get) and its scope.
type scopeRow struct {
	method, path string
	scope        scope
}

// scopeTable is every route of routes(). docs/PROTOCOL.md ("Key scopes")
// shows it (TestScopeTableDocumented).
var scopeTable = []scopeRow{
	{http.MethodGet, "/livez", scopePublic},
	{http.MethodGet, "/api/health", scopePublic},
	{http.MethodGet, "/metrics", scopePublic},
	{http.MethodGet, "/ws/node", scopeNodeSocket},

	{http.MethodPost, "/api/v1/request", scopeClient},
	{http.MethodPost, "/v1/chat/completions", scopeClient},
	{http.MethodPost, "/v1/completions", scopeClient},
	{http.MethodPost, "/v1/embeddings", scopeClient},
	{http.MethodPost, "/api/v1/tasks", scopeClient},
	{http.MethodGet, "/api/v1/tasks/:id", scopeClientOwn},
	{http.MethodDelete, "/api/v1/tasks/:id", scopeClientOwn},
	{http.MethodGet, "/api/v1/tasks/:id/stream", scopeClientOwn},
	// A rating is the account's (store.Rate checks the account): ratings
	// weigh on nodes, not on the account's other keys.
	{http.MethodPost, "/api/v1/rate", scopeClient},
	// A client key sees its own spend, the figure its limits count; what
	// the account's other keys spent is the account's.
	{http.MethodGet, "/api/v1/usage", scopeClientOwn},
	{http.MethodGet, "/api/v1/account", scopeAnyKey},

	{http.MethodDelete, "/api/v1/account", scopeAccount},
	// The secret signs the account's webhook deliveries: whoever rotates
	// it can sign deliveries its receivers believe.
	{http.MethodPost, "/api/v1/webhook-secret", scopeAccount},
	{http.MethodPost, "/api/v1/nodes/:id/pause", scopeAccountOrAdmin},
	{http.MethodPost, "/api/v1/nodes/:id/resume", scopeAccountOrAdmin},
	{http.MethodPost, "/api/v1/nodes/:id/drain", scopeAccountOrAdmin},

	{http.MethodGet, "/api/v1/status", scopePublic},
	{http.MethodGet, "/api/v1/nodes", scopePublic},
	{http.MethodGet, "/api/v1/capabilities", scopePublic},
	{http.MethodGet, "/api/v1/reputation/:node_id", scopePublic},
	{http.MethodGet, "/api/v1/leaderboard", scopePublic},
	{http.MethodGet, "/api/v1/benchmark/:node_id", scopePublic},
	{http.MethodPost, "/api/v1/register", scopePublic},
	{http.MethodGet, "/v1/models", scopePublic},

	{http.MethodGet, "/admin/api/status", scopeAdmin},
	{http.MethodGet, "/admin/api/nodes", scopeAdmin},
	{http.MethodGet, "/admin/api/overview", scopeAdmin},
	{http.MethodGet, "/admin/api/usage", scopeAdmin},
	{http.MethodGet, "/admin/api/keys", scopeAdmin},
	{http.MethodPut, "/admin/api/keys/:key/limits", scopeAdmin},
	// The group's middleware (requireAdmin) makes echo route the group's
	// unknown paths too, to answer them 404 behind it.
	{echo.RouteNotFound, "/admin/api", scopeAdmin},
	{echo.RouteNotFound, "/admin/api/*", scopeAdmin},
	// The page holds no data: it signs in with the admin token.
	{http.MethodGet, "/dashboard", scopePublic},
	{http.MethodGet, "/dashboard/", scopePublic},
	{http.MethodGet, "/dashboard/:file", scopePublic},
}

type routeKey struct{ method, path string }

// routeScopes indexes scopeTable. A struct of two strings as the key: the
// lookup on every keyed request allocates nothing.
var routeScopes = func() map[routeKey]scope {
	m := make(map[routeKey]scope, len(scopeTable))
	for _, r := range scopeTable {
		m[routeKey{r.method, r.path}] = r.scope
	}
	return m
}()

// scopeOf is the scope of the route registered as method and path.
func scopeOf(method, path string) scope {
	if method == http.MethodHead {
		method = http.MethodGet
	}
	return routeScopes[routeKey{method, path}]
}

// checkScope refuses a key the route c matched does not let in: 403
// key_scope, naming the key the route needs.
func checkScope(c echo.Context, l store.KeyLimits) error {
	method, path := c.Request().Method, c.Path()
	switch scopeOf(method, path) {
	case scopeAnyKey:
		return nil
	case scopeClient, scopeClientOwn:
		if l.MayRequest() {
			return nil
		}
		return newError(http.StatusForbidden, CodeKeyScope,
			"this API key is for nodes only; "+method+" "+path+" needs a client key or an unrestricted one")
	case scopeAccount, scopeAccountOrAdmin:
		if l.Unrestricted() {
			return nil
		}
		return newError(http.StatusForbidden, CodeKeyScope,
			"this API key is "+scopedAs(l)+"; "+method+" "+path+" needs an unrestricted key of the account (one without a use or task types: switchyard keys set-limits)")
	}
	// A public, admin or socket route does not come here; one that does,
	// or one without a row, is a defect that must not let keys through.
	return newError(http.StatusForbidden, CodeKeyScope, "no API key may use "+method+" "+path)
}

// scopedAs says how a scoped key is limited.
func scopedAs(l store.KeyLimits) string {
	var s string
	switch l.Use {
	case store.KeyUseNode:
		s = "for nodes only"
	case store.KeyUseClient:
		s = "for clients only"
	}
	if len(l.TaskTypes) > 0 {
		if s != "" {
			s += ", "
		}
		s += "limited to the task types " + strings.Join(l.TaskTypes, ", ")
	}
	return s
}

// readsKey is whose tasks and usage acct's key reads on the scopeClientOwn
// routes: "" (every key of its account) for an unrestricted key, else its
// own key id — a scoped key is handed to one machine or tenant, which has
// no business with what the account's other keys asked for.
func readsKey(acct store.Account) string {
	if acct.KeyLimits.Unrestricted() {
		return ""
	}
	return acct.KeyID
}

// mayRead reports whether acct's key may read a task of its account that
// the key keyID asked for.
func mayRead(acct store.Account, keyID string) bool {
	k := readsKey(acct)
	return k == "" || k == keyID
}
