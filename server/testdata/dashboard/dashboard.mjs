// Drives switchyard's dashboard in a real headless Chromium with
// playwright-core, as a person would: sign in with the admin token, find
// the nodes, read the usage panel, pause one with its button, take a
// screenshot, sign out.
// TestDashboardInBrowser (server/dashboard_browser_test.go) prepares the
// instance and runs it as `node dashboard.mjs`, with in the environment:
//
//   DASHBOARD_CHROMIUM    the Chromium binary
//   DASHBOARD_PROFILE     an empty directory for the browser's profile
//   DASHBOARD_URL         the dashboard's address (…/dashboard)
//   DASHBOARD_TOKEN       the admin token
//   DASHBOARD_NODE        the id of a serving node, which it pauses
//   DASHBOARD_QUARANTINED the id of a quarantined node
//   DASHBOARD_LABELLED    the id of a node that declared a version and labels
//   DASHBOARD_SCREENSHOT  where to write the PNG
//
// It judges nothing itself: it waits for each step of the way (the
// rows, their states, the buttons) and prints on stdout one JSON object
// with what it saw, which the test judges. When a step does not happen in
// time it names it in "failed", with what the page showed instead, and
// exits 1; otherwise 0.
import { chromium } from 'playwright-core';

const env = (name) => {
  const v = process.env[name];
  if (!v) {
    console.error(`dashboard.mjs: ${name} is not set (see the comment at the top)`);
    process.exit(2);
  }
  return v;
};
const bin = env('DASHBOARD_CHROMIUM');
const profile = env('DASHBOARD_PROFILE');
const url = env('DASHBOARD_URL');
const token = env('DASHBOARD_TOKEN');
const nodeID = env('DASHBOARD_NODE');
const quarantinedID = env('DASHBOARD_QUARANTINED');
const labelledID = env('DASHBOARD_LABELLED');
const screenshot = env('DASHBOARD_SCREENSHOT');

const launchTimeout = 30_000; // Chromium's start
const stepTimeout = 15_000; // one condition waited for
const overallTimeout = 60_000; // the whole walk, browser start included

const report = {
  failed: '', // "step: error" when a step did not happen
  nodeState: '', // the node's row's data-state once shown
  nodeName: '', // the node's name as the page shows it (innerText)
  labelledMeta: '', // the labelled node's version and labels line, as shown
  quarantinedState: '',
  quarantinedReason: '',
  url: '', // the page's address once signed in
  storedToken: null, // sessionStorage's token once signed in
  stateAfterPause: '', // the row's data-state once the click took effect
  resumeShown: false, // its resume button, after the click
  pauseShown: true, // its pause button, after the click
  screenshot: '', // the PNG written
  signInAfterSignOut: false, // the sign-in form shown again
  storedTokenAfterSignOut: null,
  usageRequests: '', // the usage panel's request count, as shown
  usageBars: 0, // days with a bar in its chart
  usageRows: 0, // rows of its table (account and key)
  problems: [], // console errors and uncaught exceptions, as they came
};

let done = false;
function finish(code) {
  if (done) return;
  done = true;
  process.stdout.write(JSON.stringify(report) + '\n', () => process.exit(code));
}
setTimeout(() => {
  report.failed ||= `${step}: the whole walk took over ${overallTimeout / 1000} s`;
  finish(1);
}, overallTimeout).unref();

const row = (id) => `tr[data-node-id=${JSON.stringify(id)}]`;
let page;
let step = ''; // the step under way, named in "failed"

async function run() {
  step = 'starting Chromium';
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: bin,
    headless: true, // --headless
    chromiumSandbox: false, // --no-sandbox
    viewport: { width: 1280, height: 800 },
    timeout: launchTimeout,
    args: [
      '--disable-gpu', '--no-first-run', '--no-default-browser-check',
      // No outside network here: without these Chromium keeps trying Google.
      '--disable-quic', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--disable-default-apps',
      '--window-size=1280,800',
    ],
  });
  try {
    page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(stepTimeout);
    // Listening before the page opens: every message from its first line.
    page.on('console', (m) => {
      if (m.type() === 'error') {
        const at = m.location();
        report.problems.push(`error: ${m.text()}` + (at.url ? ` (${at.url}:${at.lineNumber})` : ''));
      }
    });
    page.on('pageerror', (e) => report.problems.push(`exception: ${e.stack || e.message}`));

    step = 'opening the dashboard';
    await page.goto(url);
    step = 'signing in';
    const input = page.locator('#signin-token');
    await input.waitFor({ state: 'visible' });
    await input.fill(token);
    await page.locator('#signin-submit').click();

    const node = page.locator(row(nodeID));
    step = 'finding the node';
    await node.waitFor({ state: 'visible' });
    step = 'seeing the node serving';
    await page.locator(row(nodeID) + '[data-state="serving"]').waitFor({ state: 'visible' });
    report.nodeState = await node.getAttribute('data-state');
    report.nodeName = await node.locator('.name').innerText();

    step = 'reading a node\'s version and labels';
    report.labelledMeta = await page.locator(row(labelledID) + ' .node-meta').innerText();

    const quarantined = page.locator(row(quarantinedID));
    step = 'seeing the quarantined node';
    await page.locator(row(quarantinedID) + '[data-state="quarantined"]').waitFor({ state: 'visible' });
    report.quarantinedState = await quarantined.getAttribute('data-state');
    report.quarantinedReason = await quarantined.locator('.reason').innerText();

    step = 'reading the usage panel';
    await page.locator('#usage-body tr[data-key]').first().waitFor({ state: 'visible' });
    report.usageRequests = await page.locator('#usage-requests').innerText();
    report.usageBars = await page.locator('#usage-chart rect.ubar:not(.failed)').count();
    report.usageRows = await page.locator('#usage-body tr[data-key]').count();

    report.url = page.url();
    report.storedToken = await page.evaluate(() => sessionStorage.getItem('switchyard.adminToken'));

    step = 'pausing the node from the page';
    await node.locator('button[data-action="pause"]').click();
    await page.locator(row(nodeID) + '[data-state="paused"]').waitFor({ state: 'visible' });
    await node.locator('button[data-action="resume"]').waitFor({ state: 'visible' });
    await node.locator('button[data-action="pause"]').waitFor({ state: 'hidden' });
    report.stateAfterPause = await node.getAttribute('data-state');
    report.resumeShown = await node.locator('button[data-action="resume"]').isVisible();
    report.pauseShown = await node.locator('button[data-action="pause"]').isVisible();

    step = 'taking the screenshot';
    await page.screenshot({ path: screenshot, fullPage: true });
    report.screenshot = screenshot;

    step = 'signing out';
    await page.locator('#signout').click();
    await page.locator('#signin-token').waitFor({ state: 'visible' });
    report.signInAfterSignOut = await page.locator('#signin-token').isVisible();
    report.storedTokenAfterSignOut = await page.evaluate(() => sessionStorage.getItem('switchyard.adminToken'));
    step = '';
  } catch (e) {
    report.failed = `${step}: ${firstLine(e)}${await rowsNow()}`;
  } finally {
    await context.close().catch(() => {});
  }
}

const firstLine = (e) => String(e?.message ?? e).split('\n')[0];

// What the rows showed when a step failed, to say what came instead.
async function rowsNow() {
  if (!page || page.isClosed()) return '';
  try {
    const rows = await page.locator('tr[data-node-id]').evaluateAll((trs) =>
      trs.map((tr) => `${tr.dataset.nodeId}=${tr.dataset.state}`));
    return ` (rows shown: ${rows.join(', ') || 'none'})`;
  } catch {
    return '';
  }
}

try {
  await run();
} catch (e) {
  report.failed = `${step}: ${firstLine(e)}`;
}
finish(report.failed ? 1 : 0);
