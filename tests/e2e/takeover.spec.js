// @ts-check
// In Chromium: a holder that cannot let go is taken over (pyjobq/engine/lease.py,
// "the lease watch"). A worker host (a JupyterLite-style kernel: pyjobq's executor side in a
// dedicated worker, its scheduler a nested worker) holds the processor lease from its worker's
// bootstrap for its worker's life and has no `freeze` event: frozen with its page, it cannot
// let go. A tab in line pings it on the lease channel, finds it silent and takes the lock with
// `steal: true`; the thawed host hears that it lost the lock and gets back in line.
// Freezing needs a browser this spec launches itself (see lifecycle.spec.js for why). Each
// test uses its own /api/echo/takeover-*-<key> paths.
const { test, expect, chromium } = require("@playwright/test");
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");
const { configurePython, openHarness, py, resetServer, serverLog } = require("./helpers");

const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const FLAGS = [...require("../chromium-flags.json"), "--headless", "--remote-debugging-port=0"];
const LOCK = "ui-job-processor";

async function launchChromium() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "pyjobq-takeover-"));
  const proc = spawn(CHROMIUM, [...FLAGS, `--user-data-dir=${profile}`, "about:blank"], { stdio: ["ignore", "ignore", "pipe"] });
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

async function setState(context, page, state) {
  const cdp = await context.newCDPSession(page);
  await cdp.send("Page.setWebLifecycleState", { state });
  await cdp.detach();
}

/** Console errors of `page` and of every worker it starts (nested ones included), as they come. */
function collectErrors(page, name) {
  const errors = [];
  const note = (where) => (msg) => {
    if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) {
      errors.push(`${where}: ${msg.text()}`);
      console.log(`[${name} ${where} console error] ${msg.text()}`);
    }
  };
  page.on("console", note("page"));
  page.on("pageerror", (err) => { errors.push(`page error: ${err.message}`); console.log(`[${name} page error] ${err.message}`); });
  page.on("worker", (w) => w.on("console", note(`worker ${w.url().slice(0, 40)}`)));
  return errors;
}

/** This page's Web Locks client id (a lock it holds for a moment names it) and the lease's state. */
async function leaseState(page) {
  return page.evaluate(async (lock) => {
    const probe = `takeover-probe-${Math.random()}`;
    let mine = null;
    await navigator.locks.request(probe, async () => {
      const state = await navigator.locks.query();
      mine = state.held.find((l) => l.name === probe).clientId;
    });
    const state = await navigator.locks.query();
    return {
      mine,
      held: state.held.filter((l) => l.name === lock).map((l) => l.clientId),
      pending: state.pending.filter((l) => l.name === lock).map((l) => l.clientId),
    };
  }, LOCK);
}

/** A kernel page: /tests/kernel-repl.mjs in a dedicated worker; `window.kernel(code)` runs a cell. */
async function openKernel(context, baseURL) {
  const page = await context.newPage();
  const errors = collectErrors(page, "kernel");
  await page.goto(`${baseURL}/tests/blank.html`);
  await page.evaluate(() => new Promise((resolve, reject) => {
    const w = /** @type {any} */ (window);
    const worker = new Worker("/tests/kernel-repl.mjs", { type: "module" });
    const waiting = new Map();
    let next = 0;
    worker.onmessage = (event) => {
      const data = event.data;
      if (data.type === "ready") resolve(undefined);
      const answer = waiting.get(data.id);
      if (!answer) return;
      waiting.delete(data.id);
      if (data.ok) answer.resolve(data.value); else answer.reject(new Error(data.error));
    };
    worker.onerror = (event) => reject(new Error(String(event.message || event)));
    w.kernel = (code) => new Promise((resolve, reject) => {
      next += 1;
      waiting.set(next, { resolve, reject });
      worker.postMessage({ id: next, code });
    });
    w.lifecycle = [];
    for (const kind of ["freeze", "resume"]) document.addEventListener(kind, () => w.lifecycle.push(kind));
  }));
  const kernel = async (code) => {
    const value = await page.evaluate((c) => /** @type {any} */ (window).kernel(c), code);
    return typeof value === "string" ? JSON.parse(value) : value;
  };
  return { page, kernel, errors };
}

function uniqueKey() {
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

test.describe("a silent lease holder is taken over", () => {
  test.setTimeout(300_000);
  let chrome;
  test.beforeAll(async () => { chrome = await launchChromium(); });
  test.afterAll(async () => {
    if (chrome) {
      const exited = new Promise((resolve) => chrome.proc.once("exit", resolve));
      chrome.proc.kill();
      await exited;
      try {
        fs.rmSync(chrome.profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
      } catch (error) {
        console.log(`left the temporary profile ${chrome.profile}: ${error}`);
      }
    }
  });

  test("a frozen worker host's lease is taken by a tab in line, and the host gets back in line on resume", async ({ baseURL, request }) => {
    await resetServer(request);
    const opened = Date.now();
    const key = uniqueKey();
    const browser = await chromium.connectOverCDP(chrome.endpoint, { noDefaults: true });
    const context = browser.contexts()[0];

    // A: a kernel holding the lease; its job ran.
    const a = await openKernel(context, baseURL);
    const first = await a.kernel(`
import asyncio, json
from pyodide.http import pyfetch
import pyjobq

async def send(method, path, body):
    kw = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"}, **kw)

pyjobq.configure(transport=send)
from pyjobq import queue
first = queue.enqueue_fetch("POST", "/api/echo/takeover-a1-${key}", {"n": 1}, type="a", label="${key}")
out = await asyncio.wait_for(first.done, 90)
json.dumps([out.status, queue._queue().worker_ready])`);
    expect(first).toEqual(["done", true]);

    // B: a plain page in line behind A, pinging it every 300 ms. While A runs, its scheduler
    // (a worker nested in the kernel's worker) answers: B neither misses a ping nor steals.
    const b = await openHarness(context, {
      url: `${baseURL}/tests/harness.html`,
      setup: `import pyjobq.engine.lease\npyjobq.engine.lease.PING_MS = 300.0\n${configurePython()}`,
    });
    const bErrors = collectErrors(b, "B");
    const watchOfB = `
holder = queue._queue().lease_holder  # None until B's worker has its files and B gets in line
json.dumps(None if holder is None else
           [holder.watch.watching, holder.watch.missed, holder.watch.steals, holder.holding, queue._queue().worker_ready])`;
    await expect.poll(async () => (await py(b, watchOfB))?.[0], { timeout: 60_000 }).toBe(true); // in line
    await b.waitForTimeout(3_000); // ten pings
    expect(await py(b, watchOfB)).toEqual([true, 0, 0, false, false]);

    // Freezing A's page freezes its workers: the pongs stop, and B takes the lease.
    await setState(context, a.page, "frozen");
    const started = Date.now();
    console.log(`A frozen ${started - opened} ms into the test`);
    let taken;
    try {
      // Bounded from Playwright's side too: a held page thread is reported, not waited on.
      taken = await py(b, `
job = queue.enqueue_fetch("POST", "/api/echo/takeover-b-${key}", {"n": 2}, type="b", label="${key}")
out = await asyncio.wait_for(job.done, 120)
json.dumps([out.status, queue._queue().worker_ready])`, { timeout: 130_000 });
    } finally {
      // What B saw, whichever way that went: its watch, the lock's holders, the server's log.
      console.log(`B after ${Date.now() - started} ms: watch ${JSON.stringify(await py(b, watchOfB, { timeout: 10_000 }).catch(String))}` +
        `, lease ${JSON.stringify(await leaseState(b).catch(String))}, A's lifecycle ` +
        `${JSON.stringify(await a.page.evaluate(() => /** @type {any} */ (window).lifecycle).catch(String))}` +
        `, requests ${JSON.stringify((await serverLog(request)).map((r) => r.path).filter((p) => p.includes(key)))}`);
    }
    console.log(`B's job done ${Date.now() - started} ms after A froze`);
    expect(taken).toEqual(["done", true]); // done, and run by B's own worker: B took the lease
    expect(await py(b, watchOfB)).toEqual([false, 0, 1, true, true]);
    const duringFreeze = await leaseState(b);
    expect(duringFreeze.held).toEqual([duringFreeze.mine]);

    // A resumes: it learns its lock was taken and waits in line; its calls still answer.
    await setState(context, a.page, "active");
    expect(await a.page.evaluate(() => /** @type {any} */ (window).lifecycle)).toEqual(["freeze", "resume"]);
    const afterResume = await a.kernel(`
second = queue.enqueue_fetch("POST", "/api/echo/takeover-a2-${key}", {"n": 3}, type="a", label="${key}")
out = await asyncio.wait_for(second.done, 90)
json.dumps([out.status, (await asyncio.wait_for(first.done, 5)).status])`);
    expect(afterResume).toEqual(["done", "done"]);

    // One holder: B; A's scheduler waits in line (its request pending, from a client not B's).
    await expect.poll(async () => (await leaseState(b)).pending.length, { timeout: 30_000 }).toBe(1);
    const after = await leaseState(b);
    expect(after.held).toEqual([after.mine]);
    expect(after.pending).not.toContain(after.mine);

    // Each job ran exactly once.
    const log = await serverLog(request);
    for (const name of ["a1", "b", "a2"]) {
      expect(log.filter((r) => r.path === `/api/echo/takeover-${name}-${key}`)).toHaveLength(1);
    }
    const records = await py(b, `
recs = sorted((r["type"], r["status"], r["attempts"]) for r in await queue.query_all() if r.get("label") == "${key}")
json.dumps(recs)`);
    expect(records).toEqual([["a", "done", 1], ["a", "done", 1], ["b", "done", 1]]);
    expect(a.errors).toEqual([]);
    expect(bErrors).toEqual([]);
    await a.page.close();
    await b.close();
    await browser.close();
  });
  test("a busy page's lease is taken by a tab in line, and the page gets back in line once free", async ({ baseURL, request }) => {
    await resetServer(request);
    const key = uniqueKey();
    const browser = await chromium.connectOverCDP(chrome.endpoint, { noDefaults: true });
    const context = browser.contexts()[0];
    const watchOf = `
holder = queue._queue().lease_holder  # None until the worker has its files and the page gets in line
json.dumps(None if holder is None else
           [holder.watch.watching, holder.watch.missed, holder.watch.steals, holder.holding, queue._queue().worker_ready])`;

    // A: a plain page holding the lease for its worker (a page-held lease); its job ran.
    const a = await openHarness(context, { url: `${baseURL}/tests/harness.html`, setup: configurePython() });
    const aErrors = collectErrors(a, "A");
    const first = await py(a, `
first = queue.enqueue_fetch("POST", "/api/echo/busy-a1-${key}", {"n": 1}, type="a", label="${key}")
out = await asyncio.wait_for(first.done, 90)
json.dumps([out.status, queue._queue().worker_ready])`);
    expect(first).toEqual(["done", true]);

    // B in line, pinging every 300 ms; A's page answers while it is free.
    const b = await openHarness(context, {
      url: `${baseURL}/tests/harness.html`,
      setup: `import pyjobq.engine.lease\npyjobq.engine.lease.PING_MS = 300.0\n${configurePython()}`,
    });
    const bErrors = collectErrors(b, "B");
    await expect.poll(async () => (await py(b, watchOf))?.[0], { timeout: 60_000 }).toBe(true);
    await b.waitForTimeout(3_000);
    expect(await py(b, watchOf)).toEqual([true, 0, 0, false, false]);

    // A's page computes for 25 s without yielding (a notebook cell): far past SILENT_PINGS pings.
    const busyCall = py(a, `
import time
started = time.monotonic()
while time.monotonic() < started + 25:
    pass
time.time() * 1000`);
    await b.waitForTimeout(500); // the busy loop has begun
    const taken = await py(b, `
job = queue.enqueue_fetch("POST", "/api/echo/busy-b-${key}", {"n": 2}, type="b", label="${key}")
out = await asyncio.wait_for(job.done, 120)
json.dumps([out.status, queue._queue().worker_ready, js.Date.now()])`);
    const busyUntil = await busyCall;
    expect(taken.slice(0, 2)).toEqual(["done", true]); // run by B's own worker: B took the lease
    expect(taken[2]).toBeLessThan(busyUntil); // while A was still busy
    expect(await py(b, watchOf)).toEqual([false, 0, 1, true, true]);

    // A, free again, learns its lock was taken and gets back in line; its calls still answer.
    const afterBusy = await py(a, `
second = queue.enqueue_fetch("POST", "/api/echo/busy-a2-${key}", {"n": 3}, type="a", label="${key}")
out = await asyncio.wait_for(second.done, 90)
holder = queue._queue().lease_holder
json.dumps([out.status, holder.holding, holder.watch.watching, holder.refusing])`);
    expect(afterBusy).toEqual(["done", false, true, false]);
    await expect.poll(async () => (await leaseState(b)).pending.length, { timeout: 30_000 }).toBe(1);
    const after = await leaseState(b);
    expect(after.held).toEqual([after.mine]);
    expect(after.pending).not.toContain(after.mine);

    // Each job ran exactly once, on its first attempt.
    const log = await serverLog(request);
    for (const name of ["a1", "b", "a2"]) {
      expect(log.filter((r) => r.path === `/api/echo/busy-${name}-${key}`)).toHaveLength(1);
    }
    const records = await py(b, `
recs = sorted((r["type"], r["status"], r["attempts"]) for r in await queue.query_all() if r.get("label") == "${key}")
json.dumps(recs)`);
    expect(records).toEqual([["a", "done", 1], ["a", "done", 1], ["b", "done", 1]]);
    expect(aErrors).toEqual([]);
    expect(bErrors).toEqual([]);
    await a.close();
    await b.close();
    await browser.close();
  });
});
