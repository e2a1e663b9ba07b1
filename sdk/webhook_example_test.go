package sdk_test

import (
	"io"
	"log"
	"net/http"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// A receiver of switchyard's webhooks: verify the signature over the raw
// body before trusting it, answer 2xx quickly, and de-duplicate on the
// event id (a delivery may come more than once).
func ExampleVerifyWebhook() {
	secret := "whsec_…" // from POST /api/v1/webhook-secret, kept safe
	seen := map[string]bool{}
	http.HandleFunc("/hooks/switchyard", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "cannot read", http.StatusBadRequest)
			return
		}
		if err := sdk.VerifyWebhook(secret, r.Header, body, 5*time.Minute); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		id := r.Header.Get(sdk.WebhookEventIDHeader)
		if !seen[id] { // a real receiver keeps this in its database
			seen[id] = true
			log.Printf("task ended: %s", body)
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
