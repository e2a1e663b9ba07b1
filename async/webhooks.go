package async

import (
	"context"
	"errors"
	"fmt"
	"net/url"
)

// Webhooks is what the pump and the HTTP side need of webhook delivery
// (signing, delivery and retries are the webhooks package's). The default
// (NoWebhooks) checks URLs and delivers nothing.
type Webhooks interface {
	// CheckURL refuses a webhook_url the service will not call, with an
	// error whose text a client can read.
	CheckURL(ctx context.Context, raw string) error
	// Enqueue queues, durably, the delivery of body to url for accountID;
	// eventID (the task id) lets the receiver drop a duplicate.
	Enqueue(ctx context.Context, accountID, url, eventID string, body []byte) error
}

// ErrBadWebhookURL is the kind of NoWebhooks' CheckURL errors.
var ErrBadWebhookURL = errors.New("webhook_url must be an absolute http or https URL")

// maxWebhookURLChars bounds a webhook_url.
const maxWebhookURLChars = 2048

// NoWebhooks accepts absolute http and https URLs and enqueues nothing.
type NoWebhooks struct{}

var _ Webhooks = NoWebhooks{}

// CheckURL implements Webhooks.
func (NoWebhooks) CheckURL(_ context.Context, raw string) error {
	if len(raw) > maxWebhookURLChars {
		return fmt.Errorf("%w (at most %d characters)", ErrBadWebhookURL, maxWebhookURLChars)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ErrBadWebhookURL
	}
	return nil
}

// Enqueue implements Webhooks: nothing is delivered.
func (NoWebhooks) Enqueue(context.Context, string, string, string, []byte) error { return nil }
