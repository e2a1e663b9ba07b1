package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/switchyard-dev/switchyard/loadtest/internal/cluster"
	"go.uber.org/goleak"
)

// testBinary is the switchyard binary TestMain built for the load runs,
// and loadtestBinary this package's own, built without the race detector
// whatever the tests run with: the runs whose timings are judged drive
// the load from it, so an instrumented generator (and its in-process SDK
// nodes, several times slower under -race) does not count as the
// instances' overhead or compete with them for the two cores.
var testBinary, loadtestBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loadtest-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testBinary, err = cluster.BuildSwitchyard(context.Background(), dir)
	if err == nil {
		loadtestBinary, err = cluster.BuildLoadtest(context.Background(), dir)
	}
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
