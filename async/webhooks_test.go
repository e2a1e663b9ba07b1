package async_test

import (
	"context"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/async"
)

func TestNoWebhooksCheckURL(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://example.com/hook":   true,
		"http://10.0.0.1:8080/x?y=1": true,
		"ftp://example.com/":         false,
		"/relative":                  false,
		"https://":                   false,
		"not a url":                  false,
		"":                           false,
		"https://example.com/" + strings.Repeat("a", 3000): false,
	} {
		if err := (async.NoWebhooks{}).CheckURL(context.Background(), raw); (err == nil) != ok {
			t.Errorf("CheckURL(%.40q) = %v, want ok %v", raw, err, ok)
		}
	}
}
