package sweep

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// The baseline echoes every request and stops whole: TestMain's leak
// check fails on a goroutine it leaves behind.
func TestNATSBaseline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t.Run("echo", func(t *testing.T) {
		b, err := startNATS(3)
		if err != nil {
			t.Fatal(err)
		}
		defer b.close()
		for i := range 30 {
			body := fmt.Sprintf("request %d", i)
			if got, err := b.do(ctx, body); err != nil || got != body {
				t.Fatalf("do(%q) = %q, %v", body, got, err)
			}
		}
	})
	t.Run("no workers", func(t *testing.T) {
		b, err := startNATS(0)
		if err != nil {
			t.Fatal(err)
		}
		defer b.close()
		start := time.Now()
		_, err = b.do(ctx, "request 0")
		var se *answerError
		if !errors.As(err, &se) || se.Code != "no_responders" || time.Since(start) > time.Second {
			t.Errorf("with no workers: %v after %v", err, time.Since(start))
		}
	})
}
