// @ts-check
// Faults, bad input and security that only a real browser can show (docs/bad-input.md):
// credentials never reach IndexedDB; a hostile record in IndexedDB is never executed or
// rendered; foreign messages to the worker and on the channel are ignored and logged; the
// storage quota running out on enqueue; another tab upgrading the database.
// Nothing here is timed: waits are generous (a loaded 2-core machine) and only states are asserted.
const { test, expect } = require("@playwright/test");
const { openHarness, py, refreshingTransport, resetServer, serverLog } = require("./helpers");

test.setTimeout(240_000);

// A queue with a `noop` reconstructor, and a transport that refreshes its token on a 401
// (the chaos run's: a 401 -> refresh -> 200 flow never reaches the queue).
const SETUP = `
import asyncio, json, pyjobq
import js
${refreshingTransport({ tries: 4 })}
def noop(params):
    async def run(signal):
        return params.get("i") if isinstance(params, dict) else None
    return run

pyjobq.configure(transport=send, reconstructors={"noop": noop})
from pyjobq import queue
side = queue._queue()
"ok"
`;

/** Open a queue page; `before(page)` runs before it navigates. */
async function openPage(context, before = async (_page) => {}) {
  const page = await openHarness(context, { setup: SETUP, before });
  await py(page, CAPTURE_LOG);
  return page;
}

// Python's logging prints nothing to the console without a handler: collect the "pyjobq"
// logger's records on the page (py) and in its worker (worker.evaluate) to read them back.
const CAPTURE_LOG = `
import logging, builtins
if not hasattr(builtins, "_pyjobq_test_log"):
    class _Collect(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines = []
        def emit(self, record):
            self.lines.append(f"{record.levelname}: {record.getMessage()}")
    builtins._pyjobq_test_log = _Collect()
    logging.getLogger("pyjobq").addHandler(builtins._pyjobq_test_log)
"ok"`;
const READ_LOG = "import json, builtins\njson.dumps(builtins._pyjobq_test_log.lines)";

/** The scheduler worker of a page, once its Pyodide runs, collecting its "pyjobq" log. */
async function workerOf(page) {
  await expect.poll(() => page.workers().length, { timeout: 60_000 }).toBeGreaterThan(0);
  const worker = page.workers()[0];
  await expect.poll(() => worker.evaluate(() => !!self.pyodide), { timeout: 120_000 }).toBe(true);
  await worker.evaluate((code) => self.pyodide.runPython(code), CAPTURE_LOG);
  return worker;
}

/** Lines logged so far by "pyjobq" on the page and in its worker. */
async function pyjobqLog(page, worker) {
  const inWorker = JSON.parse(await worker.evaluate((code) => self.pyodide.runPython(code), READ_LOG));
  const onPage = await py(page, READ_LOG);
  return [...onPage.map((l) => `page ${l}`), ...inWorker.map((l) => `worker ${l}`)];
}

/** Every record of every IndexedDB database of the origin, read with raw JavaScript. */
async function dumpIndexedDB(page) {
  return page.evaluate(async () => {
    const req = (r) => new Promise((resolve, reject) => { r.onsuccess = () => resolve(r.result); r.onerror = () => reject(r.error); });
    const out = {};
    for (const { name } of await indexedDB.databases()) {
      const db = await req(indexedDB.open(name));
      out[name] = {};
      for (const store of Array.from(db.objectStoreNames)) {
        out[name][store] = await req(db.transaction(store).objectStore(store).getAll());
      }
      db.close();
    }
    return out;
  });
}

/** The raw records of the queue's store. */
async function rawJobs(page) {
  const db = await py(page, "queue.settings.db_name");
  return (await dumpIndexedDB(page))[db].jobs;
}

test("credentials are never stored: after 401 -> refresh -> 200 flows no record holds the token", async ({ context, request }) => {
  await resetServer(request);
  const secrets = [`secret-${Date.now()}-a`, `secret-${Date.now()}-b`];
  await request.post("/__control/token", { data: { token: secrets[0] } });
  const page = await openPage(context);
  await page.evaluate(() => { window.token = "stale-token-zz9"; });
  const run = (from) => py(page, `
jobs = [queue.enqueue_fetch("POST", f"/api/auth/cred{i}", {"i": i}, label=f"cred {i}") for i in range(${from}, ${from} + 4)]
json.dumps([(await asyncio.wait_for(job.done, 90)).status for job in jobs])`);
  expect(await run(0)).toEqual(["done", "done", "done", "done"]);
  // The server's token rotates: the next jobs meet a 401 first, refresh and go through.
  await request.post("/__control/token", { data: { token: secrets[1] } });
  expect(await run(4)).toEqual(["done", "done", "done", "done"]);

  const log = (await serverLog(request)).filter((r) => r.path.startsWith("/api/auth/"));
  expect(log.filter((r) => r.status === 401).length).toBeGreaterThanOrEqual(2); // both rotations seen
  expect(log.filter((r) => r.status === 200).length).toBe(8);

  const dump = JSON.stringify(await dumpIndexedDB(page));
  expect(dump).toContain("/api/auth/cred7"); // the records are there...
  for (const needle of [...secrets, "stale-token-zz9"]) expect(dump).not.toContain(needle);
  expect(dump).not.toMatch(/authorization|bearer/i); // ...and no credential in any of them
});

test("a hostile record in IndexedDB is never executed or rendered: it fails as orphaned naming the string", async ({ context }) => {
  const page = await openPage(context);
  await py(page, `
from pyjobq import ui
await ui.install()
"ok"`);
  await page.evaluate(() => document.body.append(document.createElement("bg-jobs")));
  const seed = await py(page, `
job = queue.enqueue_persistent("noop", {"i": 1}, label="seed")
await asyncio.wait_for(job.done, 90)
job.id`);
  const db = await py(page, "queue.settings.db_name");
  const names = [
    "__import__('os').system",
    "eval",
    "__import__('js').eval('self.pwned = 1; window.pwned = 1')",
  ];
  const ids = await page.evaluate(async ({ db, seed, names }) => {
    const req = (r) => new Promise((resolve, reject) => { r.onsuccess = () => resolve(r.result); r.onerror = () => reject(r.error); });
    const conn = await req(indexedDB.open(db));
    const store = conn.transaction("jobs", "readwrite").objectStore("jobs");
    const template = await req(store.get(seed));
    const ids = [];
    for (const [n, name] of names.entries()) {
      const record = {
        ...template, id: `hostile-${n}`, type: `hostile${n}`, status: "pending", attempts: 0,
        next_retry_at: 0, owner: null,
        label: `<img src=x onerror="window.xss=${n}">label ${n}`,
        error: `<script>window.xss=${n}</script>`, code: `<u onmouseover="window.xss=${n}">x</u>`,
        _reconstructor: name,
        _params: { code: "__import__('js').eval('window.pwned = 2')", html: "<img src=x onerror=window.xss=9>" },
      };
      await req(conn.transaction("jobs", "readwrite").objectStore("jobs").put(record));
      ids.push(record.id);
    }
    // One already failed: the table shows its stored error and code as they are.
    await req(conn.transaction("jobs", "readwrite").objectStore("jobs").put({
      ...template, id: "hostile-failed", status: "failed", next_retry_at: undefined, owner: null,
      label: "<img src=x onerror=window.xss=7>", error: "<script>window.xss=8</script><img src=x onerror=window.xss=8>",
      code: "<u>code</u>", _reconstructor: "eval",
    }));
    conn.close();
    return ids;
  }, { db, seed, names });

  const outcomes = await py(page, `
queue.wake()
outs = [await asyncio.wait_for(queue.job(i).done, 90) for i in ${JSON.stringify(ids)}]
json.dumps([{"status": o.status, "code": o.code, "error": o.error} for o in outs])`);
  for (const [n, outcome] of outcomes.entries()) {
    expect(outcome.status).toBe("failed");
    expect(outcome.code).toBe("orphaned");
    expect(outcome.error).toContain("orphaned: no reconstructor");
    expect(outcome.error).toContain(names[n]);
  }
  // The table shows the markup as text, with no element made from it.
  const row = (id) => page.locator(`bg-jobs tr[data-job-id="${id}"]`);
  for (const [n, id] of ids.entries()) {
    await expect(row(id).locator(".job-label")).toHaveText(`<img src=x onerror="window.xss=${n}">label ${n}`);
  }
  await py(page, "await queue.query_all()\n'ok'");  // the table loads the failed record too
  await page.evaluate(() => document.body.append(document.createElement("bg-jobs")));
  await expect(page.locator("bg-jobs").last()).toContainText("<script>window.xss=8</script><img src=x onerror=window.xss=8>");
  await expect(page.locator("bg-jobs").last()).toContainText("<u>code</u>");
  expect(await page.locator("bg-jobs img, bg-jobs script, bg-jobs u").count()).toBe(0);
  expect(await page.evaluate(() => [typeof window.xss, typeof window.pwned])).toEqual(["undefined", "undefined"]);
  const worker = page.workers()[0];
  expect(await worker.evaluate(() => typeof self.pwned)).toBe("undefined");
});

test("a foreign or malformed postMessage to the worker and on the channel is ignored and logged", async ({ context }) => {
  const page = await openPage(context);
  const worker = await workerOf(page);
  await py(page, `
js.window.pyjobqWorker = side.resources.boot.platform.worker
channel = js.BroadcastChannel.new(queue.settings.channel_name)
for text in ["not json {", "<img src=x onerror=self.pwned=1>", json.dumps([1, 2]),
             json.dumps({"v": 9, "type": "wake"}),
             json.dumps({"v": 1, "type": "__import__('js').eval('self.pwned=1')"}),
             json.dumps({"v": 1, "type": "run_result", "job_id": 5, "ok": True}),
             json.dumps({"v": 1, "type": "job-update", "jobs": "<script>self.pwned=1</script>", "source": "x"})]:
    side.resources.boot.platform.worker.postMessage(text)
    channel.postMessage(text)
channel.close()
"ok"`);
  await page.evaluate(() => {
    const w = window.pyjobqWorker;
    w.postMessage({ v: 1, type: "wake" }); // an object, not JSON text
    w.postMessage(null);
    w.postMessage(new ArrayBuffer(8));
  });
  // The queue runs on.
  expect(await py(page, `
job = queue.enqueue_persistent("noop", {"i": 7})
(await asyncio.wait_for(job.done, 90)).status`)).toBe("done");
  const logs = await pyjobqLog(page, worker);
  // 7 texts + 3 other values to the worker; 7 texts on the channel (its own end hears none of them).
  expect(logs.filter((l) => l.startsWith("worker WARNING: pyjobq scheduler ignored a message")).length).toBe(10);
  expect(logs.filter((l) => l.startsWith("worker WARNING: pyjobq scheduler ignored a channel message")).length).toBe(7);
  expect(logs.join("\n")).toContain("protocol version 9, this page speaks 1");
  expect(logs.join("\n")).toContain("run_result.job_id must be str, got int");
  expect(await worker.evaluate(() => typeof self.pwned)).toBe("undefined");
});

test("quota exceeded on enqueue: stored raises naming QuotaExceededError, done is not_stored, nothing half-written", async ({ context, baseURL }) => {
  // Chromium reads an origin's quota override when its storage is first used, so the
  // override (CDP Storage.overrideQuotaForOrigin) comes before the page opens its database.
  const origin = new URL(/** @type {string} */ (baseURL)).origin;
  let cdp;
  const page = await openPage(context, async (p) => {
    cdp = await context.newCDPSession(p);
    await cdp.send("Storage.overrideQuotaForOrigin", { origin, quotaSize: 2 * 1024 * 1024 });
  });
  const earlier = await py(page, `
jobs = [queue.enqueue_persistent("noop", {"i": i}, label=f"earlier {i}") for i in range(3)]
await asyncio.gather(*[job.done for job in jobs])
json.dumps([job.id for job in jobs])`);
  const result = await py(page, `
import base64, os
small = queue.enqueue_persistent("noop", {"i": 100}, label="quota small")
# Random data: IndexedDB compresses values, so "x" * n would fit in a few kilobytes.
big = queue.enqueue_persistent("noop", {"blob": base64.b64encode(os.urandom(6_000_000)).decode()}, label="quota big")
errors = []
for job in (small, big):  # filed in one turn: one batch, one transaction
    try:
        await asyncio.wait_for(job.stored, 90)
        errors.append(None)
    except pyjobq.PyjobqError as exc:
        errors.append(str(exc))
outs = [await asyncio.wait_for(job.done, 30) for job in (small, big)]
json.dumps({"errors": errors, "outcomes": [[o.status, o.code, o.error] for o in outs]})`);
  for (const error of result.errors) expect(error).toMatch(/IndexedDB add failed: QuotaExceededError.*quota for this origin is full/);
  for (const [status, code, error] of result.outcomes) {
    expect([status, code]).toEqual(["failed", "not_stored"]);
    expect(error).toContain("QuotaExceededError");
  }
  const jobs = await rawJobs(page);
  expect(jobs.filter((r) => String(r.label).startsWith("quota"))).toEqual([]); // the batch: all or nothing
  for (const id of earlier) expect(jobs.find((r) => r.id === id)).toMatchObject({ status: "done" });
  // The queue runs on: with room again, a job is stored and runs. (Room is made by lifting the
  // override: how soon Chromium stops counting the aborted 8 MB against a 2 MB quota is its own
  // affair — a small job then failed not_stored in about one run in ten, before and after
  // pyjobq's changes alike.)
  await cdp.send("Storage.overrideQuotaForOrigin", { origin });
  expect(await py(page, `
job = queue.enqueue_persistent("noop", {"i": 5})
(await asyncio.wait_for(job.done, 90)).status`)).toBe("done");
});

test("another tab opens the database at a newer version: the scheduler stops and requests fail saying reload", async ({ context }) => {
  const page = await openPage(context);
  const worker = await workerOf(page);
  const kept = await py(page, `
job = queue.enqueue_persistent("noop", {"i": 1}, label="before upgrade")
await asyncio.wait_for(job.done, 90)
job.id`);
  const db = await py(page, "queue.settings.db_name");
  // What a page with newer code does: open at version 3 (the worker's connection is at 2).
  const version = await page.evaluate(async (name) => {
    const r = indexedDB.open(name, 3);
    const db = await new Promise((resolve, reject) => { r.onsuccess = () => resolve(r.result); r.onerror = () => reject(r.error); r.onblocked = () => {}; });
    const v = db.version;
    db.close();
    return v;
  }, db);
  expect(version).toBe(3); // not blocked: the old connection got out of the way

  const after = await py(page, `
out = {}
try:
    await asyncio.wait_for(queue.query_all(), 60)  # a hang would raise TimeoutError here
    out["query_all"] = "answered"
except pyjobq.PyjobqError as exc:
    out["query_all"] = str(exc)
job = queue.enqueue_persistent("noop", {"i": 2})
try:
    await asyncio.wait_for(job.stored, 60)
    out["stored"] = "stored"
except pyjobq.PyjobqError as exc:
    out["stored"] = str(exc)
o = await asyncio.wait_for(job.done, 60)
out["done"] = [o.status, o.code]
v = queue.enqueue(lambda signal: asyncio.sleep(0, 3))  # volatile jobs need no database
out["volatile"] = (await asyncio.wait_for(v.done, 60)).status
json.dumps(out)`);
  expect(after.query_all).toMatch(/upgraded to version 3 by another tab.*Reload this page/);
  expect(after.stored).toMatch(/Reload this page/);
  // Never stored, and the outcome names why: the worker stopped (pyjobq.WorkerUnavailable).
  expect(after.done).toEqual(["failed", "worker_stopped"]);
  expect(after.volatile).toBe("done");
  const logs = await pyjobqLog(page, worker);
  expect(logs.filter((l) => l.startsWith("worker ERROR: pyjobq: the scheduler stopped") && l.includes("Reload this page")))
    .toHaveLength(1);
  expect(logs.filter((l) => l.startsWith("page ERROR: pyjobq: persistent jobs stopped on this page") && l.includes("Reload this page")))
    .toHaveLength(1);
  // The record written before the upgrade is untouched.
  const jobs = await rawJobs(page);
  expect(jobs.find((r) => r.id === kept)).toMatchObject({ status: "done", label: "before upgrade" });
});
