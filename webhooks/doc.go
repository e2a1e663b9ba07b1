// Package webhooks delivers signed HTTP callbacks (an async task's
// end announced to its webhook_url) at least once, durably and cluster-wide.
//
// It owns:
//   - the Dispatcher: Enqueue writes a delivery to the store's outbox
//     (store.WebhookStore) before it returns; one loop per instance claims
//     due deliveries under fenced leases (so two instances never send the
//     same attempt), sends each as a POST signed with the account's secret
//     (Switchyard-Signature, sign.go), and settles it: a 2xx ends it, any
//     other answer, a timeout or a failed dial is retried with exponential
//     backoff (backoff.go) until 24 h after the first attempt;
//   - the guard against server-side request forgery (ssrf.go): targets on
//     loopback, private, link-local, CGNAT, multicast or unspecified
//     addresses are refused when a URL is checked and again when its
//     address is dialled, unless private targets are allowed.
//
// It must not know HTTP routes, echo, Redis or which tasks end: callers
// (the async queue) decide what to send and when.
package webhooks
