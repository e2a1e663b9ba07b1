package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// browserEnv, when set (scripts/test.sh sets it), makes the browser test
// fail rather than skip when Chromium or Node.js is missing.
const browserEnv = "SWITCHYARD_BROWSER_TEST"

// browserTools finds Chromium (or Chrome), Node.js and npm, or skips the
// test saying what to install (fails instead when browserEnv is set).
func browserTools(t *testing.T) (chromium, node, npm string) {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	var missing []string
	if chromium == "" {
		missing = append(missing, "no Chromium found: install it (apt-get install -y chromium)")
	}
	node, nodeErr := exec.LookPath("node")
	npm, npmErr := exec.LookPath("npm")
	if nodeErr != nil || npmErr != nil {
		missing = append(missing, "no Node.js and npm found (they run playwright-core, which drives the browser): install them (apt-get install -y nodejs npm)")
	}
	if len(missing) == 0 {
		return chromium, node, npm
	}
	msg := strings.Join(missing, "; ") + "; or run scripts/test.sh, which does"
	if os.Getenv(browserEnv) != "" {
		t.Fatal(msg + " (" + browserEnv + " is set, so this test must run)")
	}
	t.Skip(msg)
	return "", "", ""
}

// browserReport is what testdata/dashboard/dashboard.mjs saw in the
// browser (its comment says what each field is).
type browserReport struct {
	Failed                  string   `json:"failed"`
	NodeState               string   `json:"nodeState"`
	NodeName                string   `json:"nodeName"`
	LabelledMeta            string   `json:"labelledMeta"`
	QuarantinedState        string   `json:"quarantinedState"`
	QuarantinedReason       string   `json:"quarantinedReason"`
	URL                     string   `json:"url"`
	StoredToken             *string  `json:"storedToken"`
	StateAfterPause         string   `json:"stateAfterPause"`
	ResumeShown             bool     `json:"resumeShown"`
	PauseShown              bool     `json:"pauseShown"`
	Screenshot              string   `json:"screenshot"`
	SignInAfterSignOut      bool     `json:"signInAfterSignOut"`
	StoredTokenAfterSignOut *string  `json:"storedTokenAfterSignOut"`
	UsageRequests           string   `json:"usageRequests"`
	UsageBars               int      `json:"usageBars"`
	UsageRows               int      `json:"usageRows"`
	Problems                []string `json:"problems"`
}

// orNull shows a value read from sessionStorage, null when absent.
func orNull(s *string) string {
	if s == nil {
		return "null"
	}
	return strconv.Quote(*s)
}

// The dashboard in a real browser at 1280×800 (Debian's Chromium, driven
// by the playwright-core npm package from testdata/dashboard/dashboard.mjs):
// sign in with the admin token, see a node appear (its name, which is user
// input, shown as text), pause it with its button and see its state
// change, see a quarantined node with its reason, sign out; no console
// errors, and a screenshot in the test's temp dir.
func TestDashboardInBrowser(t *testing.T) {
	chromium, nodeBin, npmBin := browserTools(t)
	dir := filepath.Join("testdata", "dashboard")
	npmCI(t, npmBin, dir, "playwright-core")

	ta := startApp(t, func(c *Config) { c.AdminToken, c.InstanceName, c.QuarantineAfter = testAdmin, "edge-1", 2 })
	key := ta.account(t, "alice", "")
	const name = `<img src=x onerror="throw 1"> gpu & co`
	n := connectNode(t, ta.wsURL, reg(key, name, "echo", "summarize"))
	// Some traffic, so the tables have figures: two served, one failed.
	for _, status := range []string{"completed", "completed", "failed"} {
		answerOne(t, ta, n, key, "echo", status)
	}

	// After the traffic, which must reach n; it declares a version and labels.
	labelled := reg(key, "worker-2", "echo")
	labelled["version"], labelled["labels"] = "1.4.2", map[string]string{"region": "eu-west", "gpu": "a100"}
	w2 := connectNode(t, ta.wsURL, labelled)
	// A node whose tasks fail for two accounts in a row is quarantined.
	flaky := connectNode(t, ta.wsURL, reg(key, "flaky", "ocr"))
	for _, k := range []string{key, ta.account(t, "bob", "")} {
		answerOne(t, ta, flaky, k, "ocr", "failed")
	}
	var e apiErr
	if code, _ := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "translate", "content": "x"}, &e); code != 404 {
		t.Fatalf("a request no node serves: %d %+v", code, e)
	}

	// The usage panel shows the ledger: what the store holds once written.
	if err := ta.writer.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC()
	ledger, err := ta.store.Usage(t.Context(), store.UsageQuery{From: today, To: today})
	if err != nil {
		t.Fatal(err)
	}
	byKey, _ := store.GroupUsage(ledger, []string{store.GroupByAccount, store.GroupByKey})
	total, _ := store.GroupUsage(ledger, nil)
	if len(total) != 1 || total[0].Requests != 6 {
		t.Fatalf("the ledger holds %+v, want the 6 requests sent", total)
	}

	shot := filepath.Join(t.TempDir(), "dashboard.png")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // the script's own limit is 1 minute
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "dashboard.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"DASHBOARD_CHROMIUM="+chromium,
		"DASHBOARD_PROFILE="+t.TempDir(), // a new profile, removed with the test
		"DASHBOARD_URL="+ta.url+"/dashboard",
		"DASHBOARD_TOKEN="+testAdmin,
		"DASHBOARD_NODE="+n.ID,
		"DASHBOARD_QUARANTINED="+flaky.ID,
		"DASHBOARD_LABELLED="+w2.ID,
		"DASHBOARD_SCREENSHOT="+shot,
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var r browserReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("node dashboard.mjs (%s): %v, and no report (%v)\nstdout: %s\nstderr: %s", chromium, runErr, err, &stdout, &stderr)
	}
	console := strings.Join(r.Problems, "\n")
	if r.Failed != "" || runErr != nil {
		t.Fatalf("in the browser (%s), %s (%v)\nconsole:\n%s\nstderr: %s", chromium, r.Failed, runErr, console, &stderr)
	}

	if r.NodeState != "serving" {
		t.Errorf("the node shows as %q, want serving", r.NodeState)
	}
	if r.QuarantinedState != "quarantined" || !strings.HasPrefix(r.QuarantinedReason, "quarantined: 2 tasks in a row failed") {
		t.Errorf("the quarantined node shows as %q, its reason as %q", r.QuarantinedState, r.QuarantinedReason)
	}
	if want := "v1.4.2 · gpu=a100 · region=eu-west"; r.LabelledMeta != want {
		t.Errorf("the labelled node's line shows %q, want %q", r.LabelledMeta, want)
	}
	if r.NodeName != name {
		t.Errorf("the node's name shows as %q, want %q as text", r.NodeName, name)
	}
	if strings.Contains(r.URL, testAdmin) || r.StoredToken == nil || *r.StoredToken != testAdmin {
		t.Errorf("the token is in the URL %q, or not in session storage (%s)", r.URL, orNull(r.StoredToken))
	}

	if r.UsageRequests != strconv.FormatInt(total[0].Requests, 10) || r.UsageBars != 1 || r.UsageRows != len(byKey) {
		t.Errorf("the usage panel shows %q requests, %d day bars, %d key rows; want %d, 1 (today), %d",
			r.UsageRequests, r.UsageBars, r.UsageRows, total[0].Requests, len(byKey))
	}

	if r.StateAfterPause != "paused" || !r.ResumeShown || r.PauseShown {
		t.Errorf("after the pause button the node shows as %q, resume button shown %v, pause button shown %v; want paused, true, false",
			r.StateAfterPause, r.ResumeShown, r.PauseShown)
	}
	if got := ta.stateOf(t, n.ID); got != "paused" {
		t.Errorf("after the click the server says the node is %q, want paused", got)
	}

	png, err := os.ReadFile(shot)
	if err != nil || r.Screenshot != shot || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("no PNG screenshot at %s (reported %q): %v", shot, r.Screenshot, err)
	} else {
		t.Logf("screenshot: %s", shot)
		if dir := os.Getenv("SWITCHYARD_SCREENSHOT_DIR"); dir != "" { // to keep one after the test
			_ = os.WriteFile(filepath.Join(dir, "dashboard.png"), png, 0o644)
		}
	}

	// Signing out forgets the token.
	if !r.SignInAfterSignOut || r.StoredTokenAfterSignOut != nil {
		t.Errorf("after signing out: sign-in form shown %v, token kept %s (want null)", r.SignInAfterSignOut, orNull(r.StoredTokenAfterSignOut))
	}
	if console != "" {
		t.Errorf("the page logged errors:\n%s", console)
	}
}
