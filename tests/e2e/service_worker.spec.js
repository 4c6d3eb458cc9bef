// @ts-check
// Saved, then every tab closed: pyjobq's Service Worker drains the queue.
// - jobs filed offline (fetch jobs and a task), every page of the origin closed, the context
//   back online and a `sync` dispatched through CDP (ServiceWorker.dispatchSyncEvent): the
//   server receives each request exactly once, and a page opened after sees them done;
// - a page that opens while it drains takes over after its run: one processor at a time;
// - Background Sync denied: it drains when it starts;
// - ended by the browser mid-run: nothing lost, no attempt spent;
// - a tab closed mid-run a moment after saving: the Service Worker takes the run over.
// Real parts throughout: Chromium's Service Worker, Background Sync, IndexedDB, Web Locks.
const { test, expect: baseExpect } = require("@playwright/test");
const { py, resetServer, serverLog, holding, newHarnessPage } = require("./helpers");

const expect = baseExpect.configure({ timeout: 60_000 });

const DB = "sw-jobs";

/** Python: a transport in an importable module (the Service Worker imports it by name), then
 *  the queue configured with the Service Worker. */
const CONFIGURE = `
import os, sys, json, asyncio
os.makedirs("/home/pyodide/sw_app", exist_ok=True)
open("/home/pyodide/sw_app/__init__.py", "w").close()
with open("/home/pyodide/sw_app/transport.py", "w") as f:
    f.write('''
import json
import js
from pyodide.http import pyfetch

#: Which context sends (the server logs it): "ServiceWorkerGlobalScope", or "Window" on a page.
SENDER = str(js.globalThis.constructor.name)

async def send(method, path, body, *, idempotency_key=None):
    headers = {"Content-Type": "application/json", "Idempotency-Key": idempotency_key or "",
               "X-Sender": SENDER}
    kw = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers=headers, **kw)
''')
with open("/home/pyodide/sw_app/tasks.py", "w") as f:
    f.write('''
import pyjobq
from pyodide.http import pyfetch

@pyjobq.task
async def ping(signal, n):
    response = await pyfetch(f"/api/echo/sw-task-{n}", method="POST", body="{}")
    return response.status
''')
if "/home/pyodide" not in sys.path:
    sys.path.insert(0, "/home/pyodide")
import pyjobq
pyjobq.configure(db_name="${DB}", lock_name="${DB}-lock", channel_name="${DB}",
                 transport="sw_app.transport:send", service_worker="/pyjobq-sw.mjs")
from pyjobq import queue
from sw_app.tasks import ping
"ok"`;

async function openQueue(context) {
  const page = await newHarnessPage(context);
  await py(page, CONFIGURE);
  return page;
}

/** The job's record once it is done (waited for up to `seconds`): its `fields`, by name. */
async function doneRecord(page, id, fields, seconds) {
  return py(page, `
async def _done():
    while True:
        _r = {r["id"]: r for r in await queue.query_all()}.get(${JSON.stringify(id)})
        if _r and str(_r["status"]) == "done":
            return _r
        await asyncio.sleep(0.2)
_r = await asyncio.wait_for(_done(), ${seconds})
json.dumps({_f: _r[_f] for _f in ${JSON.stringify(fields)}})`);
}

/** The registration id of the origin's Service Worker, through CDP on `page`. */
async function registrationId(cdp, baseURL) {
  const found = new Promise((resolve) => {
    cdp.on("ServiceWorker.workerRegistrationUpdated", ({ registrations }) => {
      const mine = registrations.find((r) => r.scopeURL.startsWith(baseURL) && !r.isDeleted);
      if (mine) resolve(mine.registrationId);
    });
  });
  await cdp.send("ServiceWorker.enable");
  return found;
}

test.beforeEach(async ({ request }) => resetServer(request));

test("jobs filed offline, every tab closed, back online, a sync: the Service Worker sends each once, and a page opened after sees them done", async ({ context, baseURL, request }) => {
  test.setTimeout(240_000);
  await context.grantPermissions(["background-sync"], { origin: baseURL });
  const page = await openQueue(context);
  await page.evaluate(() => navigator.serviceWorker.ready.then(() => "ready"));
  await context.setOffline(true);
  const ids = await py(page, `
_jobs = [queue.enqueue_fetch("POST", f"/api/echo/sw-{n}", {"n": n}) for n in range(3)]
_jobs.append(ping.enqueue(7))   # a task: the Service Worker imports its module and runs it
for _job in _jobs:
    await asyncio.wait_for(_job.stored, 30)
json.dumps([j.id for j in _jobs])`);
  expect(ids).toHaveLength(4);
  await page.close(); // every page of the origin is closed
  // A blank page off the origin carries the CDP session; it is no page of the queue.
  const blank = await context.newPage();
  const cdp = await context.newCDPSession(blank);
  const id = await registrationId(cdp, baseURL);
  await context.setOffline(false);
  await cdp.send("ServiceWorker.dispatchSyncEvent", { origin: baseURL, registrationId: id, tag: `pyjobq:${DB}`, lastChance: false });
  await expect.poll(async () => (await serverLog(request)).filter((r) => r.path.startsWith("/api/echo/sw-")).length,
    { timeout: 120_000, intervals: [500] }).toBe(4).catch(async (error) => {
    // What the Service Worker's drains said, to tell why.
    for (const w of context.serviceWorkers()) console.log("drains:", JSON.stringify(await w.evaluate(() => /** @type {any} */ (self).pyjobqDrains).catch(String)));
    throw error;
  });
  const sent = (await serverLog(request)).filter((r) => r.path.startsWith("/api/echo/sw-")).map((r) => r.path).sort();
  expect(sent).toEqual(["/api/echo/sw-0", "/api/echo/sw-1", "/api/echo/sw-2", "/api/echo/sw-task-7"]);
  // The Service Worker sent them: no page of the origin was open since before the network
  // came back. (Its drains are kept in self.pyjobqDrains for the life of one Service Worker
  // instance only, so they are not counted here: the browser may have started a new one.)
  const after = await openQueue(context);
  const statuses = await py(after, `
_records = {r["id"]: r["status"] for r in await queue.query_all()}
json.dumps([str(_records.get(i)) for i in ${JSON.stringify(ids)}])`);
  expect(statuses).toEqual(["done", "done", "done", "done"]);
  // Still once each: the page that opened had nothing left to send.
  expect((await serverLog(request)).filter((r) => r.path.startsWith("/api/echo/sw-"))).toHaveLength(4);
});

/** Dispatch the queue's sync in the origin's Service Worker, from a blank page's CDP session. */
async function dispatchSync(context, baseURL, { lastChance = false } = {}) {
  const blank = await context.newPage();
  const cdp = await context.newCDPSession(blank);
  const id = await registrationId(cdp, baseURL);
  await cdp.send("ServiceWorker.dispatchSyncEvent", { origin: baseURL, registrationId: id, tag: `pyjobq:${DB}`, lastChance });
  return { blank, cdp };
}

/** File `paths` (one lane) while offline, wait until stored, close the page. */
async function fileOfflineAndClose(context, paths) {
  const page = await openQueue(context);
  await page.evaluate(() => navigator.serviceWorker.ready.then(() => "ready"));
  await context.setOffline(true);
  const ids = await py(page, `
_jobs = [queue.enqueue_fetch("POST", p, {"p": p}) for p in ${JSON.stringify(paths)}]
for _job in _jobs:
    await asyncio.wait_for(_job.stored, 30)
json.dumps([j.id for j in _jobs])`);
  await page.close();
  return ids;
}

test("a page that opens while the Service Worker drains: the Service Worker lets the lease go after its run, the page runs the rest, and no job runs twice", async ({ context, baseURL, request }) => {
  test.setTimeout(240_000);
  await context.grantPermissions(["background-sync"], { origin: baseURL });
  const paths = ["/api/hold/sw-first", "/api/echo/sw-rest-1", "/api/echo/sw-rest-2"];
  const ids = await fileOfflineAndClose(context, paths);
  await context.setOffline(false);
  await dispatchSync(context, baseURL);
  // The Service Worker's run of the first job is at the server, held there.
  await expect.poll(async () => (await holding(request)).length,
    { timeout: 120_000, intervals: [500] }).toBe(1);
  const page = await openQueue(context);
  // The page gets in line for the lease; the Service Worker sees it waiting and stops claiming.
  await py(page, `
async def _in_line():
    while queue._queue().lease_holder is None:
        await asyncio.sleep(0.1)
await asyncio.wait_for(_in_line(), 60)
"ok"`);
  // The page's request for the lease is in the lock manager's queue (what the Service Worker
  // looks at every 250 ms, its run of the held job still going).
  await expect.poll(() => page.evaluate(async (lock) => {
    const state = await navigator.locks.query();
    return [state.held.some((l) => l.name === lock), state.pending.some((l) => l.name === lock)];
  }, `${DB}-lock`), { timeout: 60_000, intervals: [100] }).toEqual([true, true]);
  // Nothing more was sent meanwhile: one lane, its job held by the Service Worker's run.
  expect((await serverLog(request)).filter((r) => r.path.startsWith("/api/echo/sw-rest"))).toHaveLength(0);
  const released = await request.post("/__control/release", { data: { key: "sw-first" } });
  expect(released.ok()).toBeTruthy();
  const statuses = await py(page, `
async def _all_done():
    while True:
        _records = {r["id"]: r for r in await queue.query_all()}
        if all(_records.get(i, {}).get("status") == "done" for i in ${JSON.stringify(ids)}):
            return _records
        await asyncio.sleep(0.2)
_records = await asyncio.wait_for(_all_done(), 90)
json.dumps([[str(_records[i]["status"]), _records[i]["attempts"]] for i in ${JSON.stringify(ids)}])`);
  expect(statuses).toEqual([["done", 1], ["done", 1], ["done", 1]]);
  const log = await serverLog(request);
  for (const path of paths) expect(log.filter((r) => r.path === path)).toHaveLength(1);
  // The held request ended before the page's first: one processor at a time.
  const first = log.find((r) => r.path === paths[0]);
  const rest = log.filter((r) => r.path.startsWith("/api/echo/sw-rest"));
  for (const r of rest) expect(r.started).toBeGreaterThanOrEqual(first.time);
  // The Service Worker ran the held job only: it saw the page waiting and claimed nothing more
  // (it would have run the rest itself, its lane free once the held job ended); the page, once
  // it had the lease, ran the rest.
  expect(first.sender).toBe("ServiceWorkerGlobalScope");
  expect(rest.map((r) => r.sender)).toEqual(["Window", "Window"]);
});

test("a tab closed a moment after saving, mid-run: the Service Worker the save woke takes the run over once the tab is gone", async ({ context, baseURL, request }) => {
  test.setTimeout(240_000);
  await context.grantPermissions(["background-sync"], { origin: baseURL });
  const page = await openQueue(context);
  await page.evaluate(() => navigator.serviceWorker.ready.then(() => "ready"));
  // Online: the page holds the lease and sends the save itself (the server holds its request).
  const id = await py(page, `
_job = queue.enqueue_fetch("POST", "/api/hold/sw-closed", {})
await asyncio.wait_for(_job.stored, 30)
_job.id`);
  await expect.poll(async () => (await holding(request)).length,
    { timeout: 60_000, intervals: [250] }).toBe(1);
  // The sync the save asked for (fired again here, so the test does not hang on when Chromium
  // fires it): the page holds the lease, and the job is unfinished, so the drain keeps looking.
  const { blank } = await dispatchSync(context, baseURL);
  await page.close(); // mid-run: its request is on the wire, its record stays running
  await request.post("/__control/release", { data: { key: "sw-closed" } });
  // The Service Worker takes the lease once the tab is gone, recovers the run and sends it.
  await expect.poll(async () => (await serverLog(request)).filter((r) => r.path === "/api/hold/sw-closed"
    && r.sender === "ServiceWorkerGlobalScope").length, { timeout: 120_000, intervals: [500] }).toBe(1)
    .catch(async (error) => {
      for (const w of context.serviceWorkers()) console.log("drains:", JSON.stringify(await w.evaluate(() => /** @type {any} */ (self).pyjobqDrains).catch(String)));
      throw error;
    });
  await blank.close();
  const after = await openQueue(context);
  const record = await doneRecord(after, id, ["attempts", "owner"], 60);
  // The page's attempt was spent (its request may have reached the server: it did), the
  // Service Worker's was the second.
  expect(record).toEqual({ attempts: 2, owner: null });
});

test("Background Sync refused: the Service Worker drains when it starts", async ({ context, baseURL, request }) => {
  test.setTimeout(240_000);
  // Deny Background Sync to the origin, as a user's setting does (Playwright only grants).
  const probe = await context.newPage();
  const { targetInfo } = await (await context.newCDPSession(probe)).send("Target.getTargetInfo");
  const browserCdp = await /** @type {any} */ (context.browser()).newBrowserCDPSession();
  await browserCdp.send("Browser.setPermission", {
    permission: { name: "background-sync" }, setting: "denied", origin: baseURL,
    browserContextId: targetInfo.browserContextId,
  });
  await probe.close();
  const page = await openQueue(context);
  const lines = [];
  page.on("console", (msg) => lines.push(msg.text()));
  await page.evaluate(() => navigator.serviceWorker.ready.then(() => "ready"));
  expect(await page.evaluate(async () => (await navigator.permissions.query({ name: /** @type {any} */ ("background-sync") })).state)).not.toBe("granted");
  await context.setOffline(true);
  await py(page, `
_job = queue.enqueue_fetch("POST", "/api/echo/sw-on-start", {})
await asyncio.wait_for(_job.stored, 30)
"ok"`);
  await expect.poll(() => lines.some((l) => l.includes("cannot be woken by Background Sync")), { timeout: 30_000 }).toBe(true);
  await page.close();
  await context.setOffline(false);
  // The Service Worker is stopped (CDP), then started again by an event — here a message from
  // a page of the origin that runs no queue: it drains on its start.
  const blank = await context.newPage();
  const cdp = await context.newCDPSession(blank);
  await registrationId(cdp, baseURL);
  await cdp.send("ServiceWorker.stopAllWorkers");
  await blank.goto("/tests/blank.html");
  await blank.evaluate(async () => (await navigator.serviceWorker.getRegistration())?.active?.postMessage({ hello: 1 }));
  await expect.poll(async () => (await serverLog(request)).filter((r) => r.path === "/api/echo/sw-on-start").length,
    { timeout: 120_000, intervals: [500] }).toBe(1);
});

test("the Service Worker ended mid-run by the browser: nothing lost, no attempt spent", async ({ context, baseURL, request }) => {
  test.setTimeout(240_000);
  await context.grantPermissions(["background-sync"], { origin: baseURL });
  const [id] = await fileOfflineAndClose(context, ["/api/hold/sw-cut"]);
  await context.setOffline(false);
  const { cdp } = await dispatchSync(context, baseURL);
  await expect.poll(async () => (await holding(request)).length,
    { timeout: 120_000, intervals: [500] }).toBe(1);
  // The browser ends the Service Worker mid-run (its event's limit, or memory pressure).
  const versions = new Map();
  cdp.on("ServiceWorker.workerVersionUpdated", ({ versions: updated }) => {
    for (const v of updated) versions.set(v.versionId, v.runningStatus);
  });
  await cdp.send("ServiceWorker.stopAllWorkers");
  await expect.poll(() => [...versions.values()].every((status) => status === "stopped") && versions.size > 0,
    { timeout: 60_000, intervals: [250] }).toBe(true);
  const released = await request.post("/__control/release", { data: { key: "sw-cut" } });
  expect(released.ok()).toBeTruthy();
  // A page that opens recovers the cut run: the attempt is given back, and it runs to done.
  const page = await openQueue(context);
  const record = await doneRecord(page, id, ["attempts", "given_back", "cut_short"], 90);
  // Counted as cut short by the Service Worker (apart from other give-backs: at most 3 a job).
  expect(record).toEqual({ attempts: 1, given_back: 1, cut_short: 1 });
  // Sent twice: the cut run (its answer went nowhere) and the page's; the job is done once.
  expect((await serverLog(request)).filter((r) => r.path === "/api/hold/sw-cut")).toHaveLength(2);
});

test("an API outage with every tab closed spends one attempt a sync: a 503 is tried again on the next sync, not a second later", async ({ context, baseURL, request }) => {
  test.setTimeout(240_000);
  await context.grantPermissions(["background-sync"], { origin: baseURL });
  const key = "sw-outage";
  const script = (responses) => request.post("/__control/script", { data: { key, responses } });
  expect((await script([{ status: 503 }, { status: 503 }, { status: 200, body: { ok: true } }])).ok()).toBeTruthy();
  const [id] = await fileOfflineAndClose(context, [`/api/script/${key}`]);
  await context.setOffline(false);
  const sent = async () => (await serverLog(request)).filter((r) => r.path === `/api/script/${key}`);
  /** The drains the Service Worker reported, once one more ended than `after`. */
  const drainsAfter = async (after) => {
    let drains = [];
    await expect.poll(async () => {
      const worker = context.serviceWorkers()[0];
      drains = worker ? await worker.evaluate(() => /** @type {any} */ (self).pyjobqDrains || []).catch(() => []) : [];
      return drains.length;
    }, { timeout: 120_000, intervals: [500] }).toBeGreaterThan(after);
    return drains;
  };
  // The first sync: one try (503); the drain ends with the job left for the next sync.
  const { blank } = await dispatchSync(context, baseURL);
  const first = await drainsAfter(0);
  expect((await sent()).map((r) => r.status)).toEqual([503]);
  expect(first.at(-1)).toMatchObject({ left: 1 });
  await blank.close();
  // The next sync (the browser's back-off passed): one more try.
  const { blank: again } = await dispatchSync(context, baseURL);
  await drainsAfter(first.length);
  await expect.poll(async () => (await sent()).map((r) => r.status), { timeout: 60_000 }).toEqual([503, 503]);
  await again.close();
  // A page that opens later finds the job pending with two attempts spent, and sends it.
  const page = await openQueue(context);
  const out = await py(page, `
_o = await asyncio.wait_for(queue.job(${JSON.stringify(id)}).done, 90)
json.dumps([_o.status, _o.http_status])`);
  expect(out).toEqual(["done", 200]);
  expect((await sent()).map((r) => r.status)).toEqual([503, 503, 200]);
});
