// @ts-check
// Shared helpers for the multi-tab tests: open a page running pyjobq on its main thread,
// configured with a transport that sends to the test server. They build on the helper pyjobq
// ships to its users (pyjobq/testing/playwright.cjs): the page boot, the "queue ready" wait,
// job rows and statuses, crashing and freezing a tab live there.
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");
const { test, expect, chromium } = require("@playwright/test");
const kit = require("../../pyjobq/testing/playwright.cjs");

/** Our harness page: Pyodide with pyjobq, `window.py(code)` and `window.pyReady`. */
const HARNESS = "/tests/harness.html";

const README = fs.readFileSync(path.join(__dirname, "..", "..", "README.md"), "utf8");

/** The fenced block right after \`<!-- example: NAME -->\` in the README, as written. */
function readmeExample(name) {
  const after = README.split(`<!-- example: ${name} -->`)[1];
  const match = after && after.match(/^\s*```[a-z]*\n([\s\S]*?)```/);
  if (!match) throw new Error(`README.md has no example ${name}`);
  return match[1];
}

/** The fenced block right after \`<!-- example: NAME -->\` in docs/DOC, as written (a block
 * indented inside a list item comes back dedented). */
function docExample(doc, name) {
  const text = fs.readFileSync(path.join(__dirname, "..", "..", "docs", doc), "utf8");
  const after = text.split(`<!-- example: ${name} -->`)[1];
  const match = after && after.match(/^\s*?( *)```[a-z]*\n([\s\S]*?)\n *```/);
  if (!match) throw new Error(`docs/${doc} has no example ${name}`);
  const indent = match[1].length;
  return match[2].split("\n").map((line) => line.slice(Math.min(indent, line.length - line.trimStart().length))).join("\n") + "\n";
}

/** A job's record read straight from the origin's IndexedDB (no pyjobq call), or null. */
async function storedRecord(page, id, dbName = "ui-jobs") {
  return page.evaluate(async ([name, jobId]) => {
    const db = await new Promise((resolve, reject) => {
      const r = indexedDB.open(name);
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    try {
      return await new Promise((resolve, reject) => {
        const q = db.transaction("jobs").objectStore("jobs").get(jobId);
        q.onsuccess = () => resolve(q.result ?? null);
        q.onerror = () => reject(q.error);
      });
    } finally {
      db.close();
    }
  }, [dbName, id]);
}

/**
 * Python that configures the queue with a fetch transport to the test server.
 * Every request the transport sends is recorded in the page's `runs` list as
 * {path, start, end} (Date.now() ms, comparable across pages), `end` null while in flight.
 * `transport: false` configures no transport at all.
 */
function configurePython({ reconstructors = "", extra = "", transport = true } = {}) {
  return `
import json, asyncio, pyjobq
import js
from pyodide.http import pyfetch

runs = []

async def send(method, path, body):
    # Read on every replay: a test may change window.token between tries.
    headers = {"Content-Type": "application/json"}
    token = getattr(js.window, "token", None)
    if token:
        headers["Authorization"] = "Bearer " + str(token)
    kw = {} if body is None else {"body": json.dumps(body)}
    run = {"path": path, "start": js.Date.now(), "end": None}
    runs.append(run)
    try:
        return await pyfetch(path, method=method, headers=headers, **kw)
    finally:
        run["end"] = js.Date.now()

${reconstructors}
pyjobq.configure(${[transport ? "transport=send" : "", extra.replace(/^\s*,\s*/, "")].filter(Boolean).join(", ")})
from pyjobq import queue
updates = []
queue.on_update(lambda u: updates.append(dict(u)))
"ok"
`;
}

/**
 * Python: `send`, a transport to the test server that reads `window.token` on every try and,
 * on a 401, refreshes it from /api/token and tries again (up to `tries`): a 401 -> refresh ->
 * 200 flow never reaches the queue. `onSend` is Python run first on each call.
 */
function refreshingTransport({ tries = 4, onSend = "" } = {}) {
  return `
import json
import js
from pyodide.http import pyfetch

async def refresh():
    answer = await pyfetch("/api/token", method="POST")
    js.window.token = (await answer.json())["token"]

async def send(method, path, body):
    ${onSend || "pass"}
    for _ in range(${tries}):
        headers = {"Content-Type": "application/json"}
        token = getattr(js.window, "token", None)
        if token:
            headers["Authorization"] = "Bearer " + str(token)
        response = await pyfetch(path, method=method, headers=headers, body=json.dumps(body))
        if response.status != 401:
            return response
        await refresh()
    return response
`;
}

/**
 * Open our harness in a new tab, run `setup` (Python) and wait until the queue is ready.
 * `before(page)` runs before it navigates; `url` defaults to the harness.
 */
async function openHarness(context, { setup, before, url = HARNESS, timeout = 120_000 } = {}) {
  return kit.openTab(context, url, { setup, before, timeout, ready: harnessHasPython });
}

/** The harness's word that Python runs on it (after a navigation or a reload). */
function harnessHasPython() {
  return /** @type {any} */ (window).pyReady === true;
}

/** Wait until Python runs on a harness page (after a navigation or a reload). */
async function harnessReady(page, timeout = 120_000) {
  await kit.waitForPython(page, { ready: harnessHasPython, timeout });
}

/** A new tab on our harness, Python running on it; errors on its console are printed. */
async function newHarnessPage(context) {
  const page = await context.newPage();
  page.on("console", (msg) => { if (msg.type() === "error") console.log(`[page error] ${msg.text()}`); });
  await page.goto(HARNESS);
  await harnessReady(page);
  return page;
}

/** A harness page (its own Pyodide loaded) with the test server as its only reachable host. */
async function openServerOnlyHarness(context, baseURL) {
  await context.route((url) => !url.href.startsWith(baseURL), (route) => route.abort("internetdisconnected"));
  return newHarnessPage(context);
}

/** Whether the page's pyjobq scheduler worker has started Pyodide (its `self.pyodide` debugging hook). */
async function workerHasPyodide(page) {
  const worker = page.workers().find((w) => w.url().includes("#db="));
  if (!worker) throw new Error("the page has no pyjobq scheduler worker");
  return worker.evaluate(() => typeof self.pyodide !== "undefined");
}

const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const OWN_FLAGS = [...require("../chromium-flags.json"), "--headless", "--remote-debugging-port=0"];

/** Launch chromium ourselves (a fresh profile named after `name`); resolve with the process, its
 * DevTools websocket URL and the profile's folder. */
async function launchChromium(name) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), `pyjobq-${name}-`));
  const proc = spawn(CHROMIUM, [...OWN_FLAGS, `--user-data-dir=${profile}`, "about:blank"], { stdio: ["ignore", "ignore", "pipe"] });
  const endpoint = await new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(() => reject(new Error(`no DevTools endpoint from chromium:\n${seen}`)), 30_000);
    proc.stderr.on("data", (chunk) => {
      seen += chunk;
      const m = /DevTools listening on (ws:\/\/\S+)/.exec(seen);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on("exit", (code) => reject(new Error(`chromium exited (${code}):\n${seen}`)));
  });
  return { proc, endpoint, profile };
}

/**
 * A Chromium of the describe block's own, whose pages can be frozen: Playwright's own pages
 * cannot (focus emulation keeps them visible, so CDP Page.setWebLifecycleState is a silent
 * no-op; docs/decisions.md). Launched before the block's tests with --remote-debugging-port,
 * ended after them; `connect()` gives `{ browser, context }`, connected with
 * connectOverCDP(..., { noDefaults: true }).
 */
function ownChromium(name) {
  let chrome;
  test.beforeAll(async () => { chrome = await launchChromium(name); });
  test.afterAll(async () => {
    if (chrome) {
      const exited = new Promise((resolve) => chrome.proc.once("exit", resolve));
      chrome.proc.kill();
      await exited;
      // Chromium's helper processes can still be writing the profile just after the browser
      // process exits (seen: ENOTEMPTY); retry, and never fail the test over a temp folder.
      try {
        fs.rmSync(chrome.profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
      } catch (error) {
        console.log(`left the temporary profile ${chrome.profile}: ${error}`);
      }
    }
  });
  return {
    async connect() {
      const browser = await chromium.connectOverCDP(chrome.endpoint, { noDefaults: true });
      return { browser, context: browser.contexts()[0] };
    },
  };
}

/** Set a page's lifecycle state ("frozen", "active") through CDP Page.setWebLifecycleState. */
async function setLifecycleState(context, page, state) {
  const cdp = await context.newCDPSession(page);
  await cdp.send("Page.setWebLifecycleState", { state });
  await cdp.detach();
}

/** Block everything but the test server, open the harness and configure the queue. */
async function openQueuePage(context, baseURL, options = {}) {
  await context.route(
    (url) => !url.href.startsWith(baseURL),
    (route) => route.abort("internetdisconnected"),
  );
  return openHarness(context, { setup: configurePython(options) });
}

/** Wait until the page's queue answers (its own store requests: at once, whatever its worker does). */
async function queueReady(page, timeout = 120_000) {
  await kit.queueReady(page, { timeout });
}

/** Wait until this tab's scheduler worker runs Pyodide: only the tab holding the lease gets there. */
async function workerReady(page, timeoutSeconds = 60) {
  await py(page, `
async def _worker_ready():
    while not queue._queue().worker_ready:
        await asyncio.sleep(0.1)
await asyncio.wait_for(_worker_ready(), ${timeoutSeconds})
'ok'`);
}

/** Run Python on a page; a JSON string result comes back decoded. `options.timeout` (ms) bounds
 * the run from Playwright's side, so a page whose thread is held says so instead of hanging. */
async function py(page, code, options = {}) {
  return kit.py(page, code, options);
}

async function resetServer(request) {
  const res = await request.post("/__control/reset");
  expect(res.ok()).toBeTruthy();
}

/** The test server's request log: [{started, time, method, path, status, job_id}]. */
async function serverLog(request) {
  return (await request.get("/__control/log")).json();
}

/** Keys of /api/hold/<key> requests blocked on the server right now (one entry per request). */
async function holding(request) {
  return (await request.get("/__control/holding")).json();
}

/** Let /api/hold/<key> requests go (all keys held now when key is omitted). */
async function release(request, key) {
  const res = await request.post("/__control/release", { data: key === undefined ? {} : { key } });
  expect(res.ok()).toBeTruthy();
}

module.exports = {
  readmeExample, docExample, storedRecord, openQueuePage, queueReady, workerReady, py, configurePython, resetServer, serverLog,
  holding, release,
  HARNESS, openHarness, harnessReady, refreshingTransport, newHarnessPage, openServerOnlyHarness, workerHasPyodide,
  ownChromium, setLifecycleState,
  jobs: kit.jobs, jobRow: kit.jobRow, waitForStatus: kit.waitForStatus, crashTab: kit.crashTab,
  freezeTab: kit.freezeTab, waitForPython: kit.waitForPython,
};
