package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildSwitchyard builds cmd/switchyard of the module that contains the
// working directory into dir.
func BuildSwitchyard(ctx context.Context, dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "switchyard")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/switchyard")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/switchyard in %s: %w\n%s", root, err, b)
	}
	return out, nil
}

// BuildLoadtest builds this load test of the module that contains the
// working directory into dir (its tests run the binary).
func BuildLoadtest(ctx context.Context, dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "loadtest")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join(root, "loadtest") // a module of its own; its main package is at its root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", cmd.Dir, err, b)
	}
	return out, nil
}

// rootModule is the path of the module that holds cmd/switchyard.
const rootModule = "github.com/switchyard-dev/switchyard"

// ModuleRoot finds the directory of the switchyard module's go.mod (not
// the load test's own, nested one), from the working directory upwards.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module "+rootModule+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the switchyard module, so switchyard cannot be built here: pass --switchyard PATH")
		}
		dir = parent
	}
}
