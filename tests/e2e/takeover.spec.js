// @ts-check
// In Chromium: a holder that cannot let go is taken over (pyjobq/engine/lease.py,
// "the lease watch"). A worker host (a JupyterLite-style kernel: pyjobq's executor side in a
// dedicated worker, its scheduler a nested worker) holds the processor lease from its worker's
// bootstrap for its worker's life and has no `freeze` event: frozen with its page, it cannot
// let go. A tab in line pings it on the lease channel, finds it silent and takes the lock with
// `steal: true`; the thawed host hears that it lost the lock and gets back in line.
// Freezing needs a browser this spec launches itself (ownChromium in helpers.js says why). Each
// test uses its own /api/echo/takeover-*-<key> paths.
const { test, expect } = require("@playwright/test");
const { configurePython, openHarness, py, resetServer, serverLog, ownChromium, setLifecycleState } = require("./helpers");

const LOCK = "ui-job-processor";

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

/** Python: what a page's lease watch says — [watching, missed, steals, holding, worker ready] —
 * or None until the page's worker has its files and the page gets in line. */
const WATCH = `
holder = queue._queue().lease_holder
json.dumps(None if holder is None else
           [holder.watch.watching, holder.watch.missed, holder.watch.steals, holder.holding, queue._queue().worker_ready])`;

/** B: a plain page in line behind the holder, pinging it every 300 ms. While the holder answers,
 * B neither misses a ping nor steals. Gives the page and its console errors. */
async function openTabInLine(context, baseURL) {
  const page = await openHarness(context, {
    url: `${baseURL}/tests/harness.html`,
    setup: `import pyjobq.engine.lease\npyjobq.engine.lease.PING_MS = 300.0\n${configurePython()}`,
  });
  const errors = collectErrors(page, "B");
  await expect.poll(async () => (await py(page, WATCH))?.[0], { timeout: 60_000 }).toBe(true); // in line
  await page.waitForTimeout(3_000); // ten pings
  expect(await py(page, WATCH)).toEqual([true, 0, 0, false, false]);
  return { b: page, bErrors: errors };
}

/** One holder, B; the other waits in line (its request pending, from a client not B's). */
async function expectHeldByBOtherInLine(b) {
  await expect.poll(async () => (await leaseState(b)).pending.length, { timeout: 30_000 }).toBe(1);
  const after = await leaseState(b);
  expect(after.held).toEqual([after.mine]);
  expect(after.pending).not.toContain(after.mine);
}

/** Each of the test's jobs (A's a1 and a2, B's b, at /api/echo/<prefix>-<name>-<key>) ran
 * exactly once, on its first attempt. */
async function expectEachRanOnce(request, b, prefix, key) {
  const log = await serverLog(request);
  for (const name of ["a1", "b", "a2"]) {
    expect(log.filter((r) => r.path === `/api/echo/${prefix}-${name}-${key}`)).toHaveLength(1);
  }
  const records = await py(b, `
recs = sorted((r["type"], r["status"], r["attempts"]) for r in await queue.query_all() if r.get("label") == "${key}")
json.dumps(recs)`);
  expect(records).toEqual([["a", "done", 1], ["a", "done", 1], ["b", "done", 1]]);
}

function uniqueKey() {
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

test.describe("a silent lease holder is taken over", () => {
  test.setTimeout(300_000);
  const chrome = ownChromium("takeover");

  test("a frozen worker host's lease is taken by a tab in line, and the host gets back in line on resume", async ({ baseURL, request }) => {
    await resetServer(request);
    const opened = Date.now();
    const key = uniqueKey();
    const { browser, context } = await chrome.connect();

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

    // B: a plain page in line behind A. While A runs, its scheduler (a worker nested in the
    // kernel's worker) answers B's pings.
    const { b, bErrors } = await openTabInLine(context, baseURL);

    // Freezing A's page freezes its workers: the pongs stop, and B takes the lease.
    await setLifecycleState(context, a.page, "frozen");
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
      console.log(`B after ${Date.now() - started} ms: watch ${JSON.stringify(await py(b, WATCH, { timeout: 10_000 }).catch(String))}` +
        `, lease ${JSON.stringify(await leaseState(b).catch(String))}, A's lifecycle ` +
        `${JSON.stringify(await a.page.evaluate(() => /** @type {any} */ (window).lifecycle).catch(String))}` +
        `, requests ${JSON.stringify((await serverLog(request)).map((r) => r.path).filter((p) => p.includes(key)))}`);
    }
    console.log(`B's job done ${Date.now() - started} ms after A froze`);
    expect(taken).toEqual(["done", true]); // done, and run by B's own worker: B took the lease
    expect(await py(b, WATCH)).toEqual([false, 0, 1, true, true]);
    const duringFreeze = await leaseState(b);
    expect(duringFreeze.held).toEqual([duringFreeze.mine]);

    // A resumes: it learns its lock was taken and waits in line; its calls still answer.
    await setLifecycleState(context, a.page, "active");
    expect(await a.page.evaluate(() => /** @type {any} */ (window).lifecycle)).toEqual(["freeze", "resume"]);
    const afterResume = await a.kernel(`
second = queue.enqueue_fetch("POST", "/api/echo/takeover-a2-${key}", {"n": 3}, type="a", label="${key}")
out = await asyncio.wait_for(second.done, 90)
json.dumps([out.status, (await asyncio.wait_for(first.done, 5)).status])`);
    expect(afterResume).toEqual(["done", "done"]);

    // One holder: B; A's scheduler waits in line. Each job ran exactly once.
    await expectHeldByBOtherInLine(b);
    await expectEachRanOnce(request, b, "takeover", key);
    expect(a.errors).toEqual([]);
    expect(bErrors).toEqual([]);
    await a.page.close();
    await b.close();
    await browser.close();
  });
  test("a busy page's lease is taken by a tab in line, and the page gets back in line once free", async ({ baseURL, request }) => {
    await resetServer(request);
    const key = uniqueKey();
    const { browser, context } = await chrome.connect();

    // A: a plain page holding the lease for its worker (a page-held lease); its job ran.
    const a = await openHarness(context, { url: `${baseURL}/tests/harness.html`, setup: configurePython() });
    const aErrors = collectErrors(a, "A");
    const first = await py(a, `
first = queue.enqueue_fetch("POST", "/api/echo/busy-a1-${key}", {"n": 1}, type="a", label="${key}")
out = await asyncio.wait_for(first.done, 90)
json.dumps([out.status, queue._queue().worker_ready])`);
    expect(first).toEqual(["done", true]);

    // B in line; A's page answers its pings while it is free.
    const { b, bErrors } = await openTabInLine(context, baseURL);

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
    expect(await py(b, WATCH)).toEqual([false, 0, 1, true, true]);

    // A, free again, learns its lock was taken and gets back in line; its calls still answer.
    const afterBusy = await py(a, `
second = queue.enqueue_fetch("POST", "/api/echo/busy-a2-${key}", {"n": 3}, type="a", label="${key}")
out = await asyncio.wait_for(second.done, 90)
holder = queue._queue().lease_holder
json.dumps([out.status, holder.holding, holder.watch.watching, holder.refusing])`);
    expect(afterBusy).toEqual(["done", false, true, false]);
    await expectHeldByBOtherInLine(b);

    // Each job ran exactly once, on its first attempt.
    await expectEachRanOnce(request, b, "busy", key);
    expect(aErrors).toEqual([]);
    expect(bErrors).toEqual([]);
    await a.close();
    await b.close();
    await browser.close();
  });
});
