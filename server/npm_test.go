package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Tests that run npm packages under Node.js (the openai client library, the
// dashboard in Chromium through playwright-core) install them the same way.

// npmCI installs the packages locked in dir's package-lock.json (npm ci)
// unless pkg is installed there already.
func npmCI(t *testing.T, npm, dir, pkg string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		if os.Getenv("SWITCHYARD_TEST_SKIP_NODE") == "1" {
			t.Skipf("npm ci failed and SWITCHYARD_TEST_SKIP_NODE=1: %v\n%s", err, out)
		}
		t.Fatalf("npm ci in %s failed (set SWITCHYARD_TEST_SKIP_NODE=1 to skip this test when the npm registry cannot be reached): %v\n%s", dir, err, out)
	}
}
