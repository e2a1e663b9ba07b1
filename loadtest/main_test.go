package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// testBinary is the switchyard binary TestMain built for the load runs.
var testBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loadtest-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testBinary, err = buildSwitchyard(context.Background(), dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}
