// @ts-check
// A tab that cannot process never holds the processor lease, and a boot that failed or
// stalled is retried until it boots, with no reload:
// - a tab that only imported the queue takes over while the network is down: it boots from
//   the distribution's files its worker fetched while it waited, tries the job it filed
//   offline (costing nothing), and sends it once the moment the network is back;
// - a tab whose worker's pyodide.asm.wasm download is never answered never holds the lease:
//   another tab runs its jobs, its `done` resolves from that tab's news, and once the download
//   goes through it gets back in line and boots when the lease comes to it;
// - a tab whose worker could not fetch pyodide.asm.mjs keeps answering, stores its job, and
//   boots on a retry once the network is back, then runs the job.
// Routing: page.route sees the requests of the page's module worker in this Chromium, so one
// tab's worker can be starved while another's is served.
const { test, expect: baseExpect } = require("@playwright/test");
const { openQueuePage, workerReady, py, resetServer, serverLog, storedRecord, openServerOnlyHarness, workerHasPyodide } = require("./helpers");

const expect = baseExpect.configure({ timeout: 60_000 });

/** Configure a transport to the test server and import the queue — no call into it. */
function onlyImport(extra = "") {
  return `
import json, asyncio, pyjobq
from pyodide.http import pyfetch

async def send(method, path, body):
    kw = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"}, **kw)

pyjobq.configure(transport=send${extra})
from pyjobq import queue
"imported"
`;
}

/** A harness page (its own Pyodide loaded) with the test server as its only reachable host,
 * marked `window.notReloaded` (a reload would drop the mark). */
async function openHarness(context, baseURL) {
  const page = await openServerOnlyHarness(context, baseURL);
  await page.evaluate(() => { /** @type {any} */ (window).notReloaded = true; });
  return page;
}

/** Wait until `condition` (a Python expression on the page) holds; polls in Python. */
async function until(page, condition, seconds = 60) {
  await py(page, `
async def _until():
    while not (${condition}):
        await asyncio.sleep(0.1)
await asyncio.wait_for(_until(), ${seconds})
"ok"`);
}

/** The page's queue holds the processor lease for its worker, or is in line for it. */
const IN_LINE = "queue._queue().lease_holder is not None";

async function file(page, path, n) {
  return py(page, `
_job = queue.enqueue_fetch("POST", ${JSON.stringify(path)}, {"n": ${n}})
await asyncio.wait_for(_job.stored, 10)   # stored by the page's own scheduler, whatever its worker does
_job.id`);
}

async function sentTo(request, path) {
  return (await serverLog(request)).filter((r) => r.path === path);
}

test("a waiting tab takes over while offline: it boots from the files it fetched while waiting and sends the job once when back online", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const a = await openQueuePage(context, baseURL);
  await workerReady(a); // A processes
  const b = await openHarness(context, /** @type {string} */ (baseURL));
  expect(await py(b, onlyImport())).toBe("imported");
  await until(b, IN_LINE); // its worker holds the distribution's files and waits in line
  expect(await workerHasPyodide(b)).toBe(false); // bytes, not a running Pyodide

  await context.setOffline(true);
  const id = await file(b, "/api/echo/offline-takeover", 1);
  // A leaves by navigating away, not by page.close(): a closing page's DevTools session detaches
  // before its JavaScript stops, which lifts setOffline, so a send A starts in its last
  // milliseconds would reach the server though the context is offline.
  await a.goto("about:blank");
  await workerReady(b); // granted the lease with no network: it boots from what it holds
  // It tries the job offline: the failure costs no attempt, and the job waits for the network.
  let tried = null;
  await expect.poll(async () => {
    tried = await storedRecord(b, id);
    return tried && tried.status === "pending" && tried.given_back >= 1;
  }, { intervals: [250] }).toBe(true);
  // No attempt spent offline, but for one: A may have claimed the job from B's news before it
  // was closed, and a run whose page went away counts (spec: a dead run is not given back).
  expect(tried).toMatchObject({ status: "pending", code: "offline" });
  expect(tried.attempts).toBeLessThanOrEqual(1);
  expect(await sentTo(request, "/api/echo/offline-takeover")).toHaveLength(0);

  await context.setOffline(false);
  await expect.poll(async () => (await storedRecord(b, id))?.status, { intervals: [250] }).toBe("done");
  expect(await storedRecord(b, id)).toMatchObject({ status: "done", attempts: tried.attempts + 1 });
  expect(await sentTo(request, "/api/echo/offline-takeover")).toHaveLength(1);
  expect(await b.evaluate(() => /** @type {any} */ (window).notReloaded)).toBe(true);
});

test("a tab whose pyodide.asm.wasm download is never answered never holds the lease; another tab runs its jobs; it boots once the download goes through", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const a = await openHarness(context, /** @type {string} */ (baseURL));
  /** @type {import("@playwright/test").Route[]} */
  const stalled = [];
  let stalling = true;
  // Only A's worker asks for it from now on (A's own Pyodide has loaded): left unanswered.
  await a.route("**/pyodide.asm.wasm", (route) => (stalling ? void stalled.push(route) : route.continue()));
  expect(await py(a, onlyImport(", worker_start_timeout_ms=10_000"))).toBe("imported");
  const first = await file(a, "/api/echo/stalled-tab-first", 1);
  await expect.poll(() => stalled.length).toBeGreaterThanOrEqual(1);

  // Another tab takes the lease: A's stalled worker does not hold it.
  const b = await openQueuePage(context, baseURL);
  await workerReady(b);
  const second = await file(a, "/api/echo/stalled-tab-second", 2);
  await expect.poll(async () => (await storedRecord(b, first))?.status, { intervals: [250] }).toBe("done");
  await expect.poll(async () => (await storedRecord(b, second))?.status, { intervals: [250] }).toBe("done");
  // A heard the news: its jobs' done resolved, nothing failed for good on A.
  expect(await py(a, `json.dumps([(await asyncio.wait_for(queue.job(${JSON.stringify(first)}).done, 30)).status,
                                  (await asyncio.wait_for(queue.job(${JSON.stringify(second)}).done, 30)).status,
                                  queue._queue().unavailable is None])`)).toEqual(["done", "done", true]);
  // Its boot was given up on (no progress within its deadline), not failed for good.
  await until(a, "queue._queue().resources.boot.last_failure is not None");
  expect(await py(a, "json.dumps([queue._queue().resources.boot.last_failure.stage, queue._queue().unavailable is None])"))
    .toEqual(["timeout", true]);

  // The download goes through: A's next worker fetches its files and gets back in line.
  stalling = false;
  for (const route of stalled.splice(0)) await route.abort("timedout").catch(() => {}); // a failure: A retries
  await until(a, IN_LINE);
  expect(await workerHasPyodide(a)).toBe(false); // behind B
  await b.close();
  await workerReady(a); // the lease came to it: it boots, no reload
  const third = await file(a, "/api/echo/stalled-tab-third", 3);
  expect(await py(a, `(await asyncio.wait_for(queue.job(${JSON.stringify(third)}).done, 60)).status`)).toBe("done");
  for (const path of ["/api/echo/stalled-tab-first", "/api/echo/stalled-tab-second", "/api/echo/stalled-tab-third"]) {
    expect(await sentTo(request, path), path).toHaveLength(1);
  }
  expect(await a.evaluate(() => /** @type {any} */ (window).notReloaded)).toBe(true);
});

test("a tab whose worker could not fetch pyodide.asm.mjs keeps answering and boots on a retry once back online", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const a = await openHarness(context, /** @type {string} */ (baseURL));
  // A's own Pyodide has loaded; its worker's copy of the module fails to download.
  await a.route("**/pyodide.asm.mjs", (route) => route.abort("internetdisconnected"));
  expect(await py(a, onlyImport())).toBe("imported");
  const id = await file(a, "/api/echo/asm-failed", 1);
  // Not WorkerUnavailable: the tab answers, its job waits, and it is not in line for the lease.
  expect(await py(a, "json.dumps([len(await asyncio.wait_for(queue.query_all(), 10)), queue._queue().unavailable is None])"))
    .toEqual([1, true]);
  await until(a, "queue._queue().resources.boot.last_failure is not None");
  expect(await py(a, `json.dumps([queue._queue().resources.boot.last_failure.stage, ${IN_LINE}])`)).toEqual(["fetch", false]);

  // The network drops; the module could be fetched now, but nothing can be while offline.
  await context.setOffline(true);
  await a.unroute("**/pyodide.asm.mjs");
  await until(a, "not queue._queue().resources.boot.last_failure.online"); // a retry failed offline
  expect(await storedRecord(a, id)).toMatchObject({ status: "pending", attempts: 0 });

  await context.setOffline(false); // `online`: a new worker at once
  await workerReady(a);
  expect(await py(a, `(await asyncio.wait_for(queue.job(${JSON.stringify(id)}).done, 60)).status`)).toBe("done");
  expect(await storedRecord(a, id)).toMatchObject({ status: "done", attempts: 1 });
  expect(await sentTo(request, "/api/echo/asm-failed")).toHaveLength(1);
  expect(await a.evaluate(() => /** @type {any} */ (window).notReloaded)).toBe(true);
});
