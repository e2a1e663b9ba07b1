package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserEnv, when set (scripts/test.sh sets it), makes the browser test
// fail rather than skip when no Chromium is found.
const browserEnv = "SWITCHYARD_BROWSER_TEST"

// chromium finds a Chromium (or Chrome) binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found: install it (apt-get install -y chromium), or run scripts/test.sh, which does"
	if os.Getenv(browserEnv) != "" {
		t.Fatal(msg + " (" + browserEnv + " is set, so this test must run)")
	}
	t.Skip(msg)
	return ""
}

// The dashboard in a real browser at 1280×800: sign in with the admin
// token, see a node appear (its name, which is user input, shown as text),
// pause it with its button and see its state change, see a quarantined
// node with its reason; no console errors, and a screenshot in the test's
// temp dir.
func TestDashboardInBrowser(t *testing.T) {
	bin := chromium(t)
	ta := startApp(t, func(c *Config) { c.AdminToken, c.InstanceName, c.QuarantineAfter = testAdmin, "edge-1", 2 })
	key := ta.account(t, "alice", "")
	const name = `<img src=x onerror="throw 1"> gpu & co`
	n := connectNode(t, ta.wsURL, reg(key, name, "echo", "summarize"))
	// Some traffic, so the tables have figures: two served, one failed.
	for _, status := range []string{"completed", "completed", "failed"} {
		answerOne(t, ta, n, key, "echo", status)
	}

	connectNode(t, ta.wsURL, reg(key, "worker-2", "echo")) // after the traffic, which must reach n
	// A node whose tasks fail for two accounts in a row is quarantined.
	flaky := connectNode(t, ta.wsURL, reg(key, "flaky", "ocr"))
	for _, k := range []string{key, ta.account(t, "bob", "")} {
		answerOne(t, ta, flaky, k, "ocr", "failed")
	}
	var e apiErr
	if code, _ := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "translate", "content": "x"}, &e); code != 404 {
		t.Fatalf("a request no node serves: %d %+v", code, e)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		// No outside network here: without these Chromium keeps trying Google.
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.WindowSize(1280, 800),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := context.WithTimeout(actx, 60*time.Second)
	defer cancel()
	ctx, cancelTab := chromedp.NewContext(ctx)
	defer cancelTab()

	// Subscribed before the page opens: every message from its first line.
	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(ctx)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("starting Chromium (%s): %v", bin, err)
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				mu.Lock()
				problems = append(problems, string(m.Type)+": "+m.String())
				mu.Unlock()
			}
		}
	}()
	seen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(problems, "\n")
	}

	row := chromedp.CSS(fmt.Sprintf(`tr[data-node-id=%q]`, n.ID))
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ta.url+"/dashboard"),
		chromedp.WaitVisible(chromedp.ID("signin-token")),
		chromedp.SendKeys(chromedp.ID("signin-token"), testAdmin),
		chromedp.Click(chromedp.ID("signin-submit")),
		chromedp.WaitVisible(row),
		chromedp.WaitVisible(row+`[data-state="serving"]`),
	); err != nil {
		t.Fatalf("signing in and finding the node: %v (console: %s)", err, seen())
	}
	flakyRow := chromedp.CSS(fmt.Sprintf(`tr[data-node-id=%q]`, flaky.ID))
	if err := chromedp.Do(ctx, chromedp.WaitVisible(flakyRow+`[data-state="quarantined"]`)); err != nil {
		t.Fatalf("the quarantined node: %v (console: %s)", err, seen())
	}
	if why, err := chromedp.Run(ctx, chromedp.Text(flakyRow+` .reason`)); err != nil || !strings.HasPrefix(why, "quarantined: 2 tasks in a row failed") {
		t.Errorf("the quarantined node's reason shows as %q (%v)", why, err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Text(row+` .name`))
	if err != nil || shown != name {
		t.Errorf("the node's name shows as %q (%v), want %q as text", shown, err, name)
	}
	url, _ := chromedp.Run(ctx, chromedp.Location())
	stored, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem("switchyard.adminToken")`))
	if strings.Contains(url, testAdmin) || stored != testAdmin {
		t.Errorf("the token is in the URL %q, or not in session storage (%q)", url, stored)
	}

	if err := chromedp.Do(ctx,
		chromedp.Click(row+` button[data-action="pause"]`),
		chromedp.WaitVisible(row+`[data-state="paused"]`),
		chromedp.WaitVisible(row+` button[data-action="resume"]`),
		chromedp.WaitNotVisible(row+` button[data-action="pause"]`),
	); err != nil {
		t.Fatalf("pausing the node from the page: %v (console: %s)", err, seen())
	}
	if got := ta.stateOf(t, n.ID); got != "paused" {
		t.Fatalf("after the click the server says the node is %q, want paused", got)
	}

	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
	if dir := os.Getenv("SWITCHYARD_SCREENSHOT_DIR"); dir != "" { // to keep one after the test
		_ = os.WriteFile(filepath.Join(dir, "dashboard.png"), png, 0o644)
	}

	// Signing out forgets the token.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("signout")),
		chromedp.WaitVisible(chromedp.ID("signin-token")),
	); err != nil {
		t.Fatal(err)
	}
	if gone, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`sessionStorage.getItem("switchyard.adminToken") === null`)); err != nil || !gone {
		t.Errorf("after signing out the token is still kept (%v)", err)
	}
	cancelTab()
	<-watched
	if p := seen(); p != "" {
		t.Fatalf("the page logged errors:\n%s", p)
	}
}
