// @ts-check
// The persistent queue, complete: the single processor across tabs, a tab dying mid-run,
// reload survival, offline spells, 401 / 403 / 409 / 422, orphaned and transport-less jobs,
// the per-type lanes, delete_job on a running job and cleanup_old's retention.
//
// Every page records the requests its transport sent in `runs` (helpers.js); the test server
// logs every request it answered, and /api/hold/<key> keeps a request open until released.
const { test, expect: baseExpect } = require("@playwright/test");
const {
  openQueuePage, py, configurePython, resetServer, serverLog, holding, release,
  harnessReady, workerReady, storedRecord,
} = require("./helpers");

// Polls wait out a loaded 2-core machine; what they wait for is still bounded.
const expect = baseExpect.configure({ timeout: 15_000 });

const LOCK = "ui-job-processor"; // the default lock name: helpers configure no names

/** A job's stored record (with _params), or null. */
async function record(page, id) {
  return py(page, `
_recs = [r for r in await queue.query_all() if r["id"] == ${JSON.stringify(id)}]
json.dumps(_recs[0] if _recs else None)
`);
}

/** Await a job's done on a page (by id) and return the Outcome as a plain object. */
async function outcome(page, id, timeoutS = 20) {
  return py(page, `
_o = await asyncio.wait_for(queue.job(${JSON.stringify(id)}).done, ${timeoutS})
json.dumps({"id": _o.id, "status": _o.status, "result": _o.result, "error": _o.error,
            "http_status": _o.http_status, "code": _o.code})
`);
}

/** A job filed and done on a first page, which then closes; then `recordsOf(itsRecord)` put as
 * other code writes them, from a page of the origin that runs no pyjobq (no pass of a closing
 * page can take them first). Returns the done job's id. */
async function doneThenWritten(context, baseURL, recordsOf) {
  const page = await openQueuePage(context, baseURL);
  const db = await py(page, "queue.settings.db_name");
  const id = await py(page, `
job = queue.enqueue_fetch("POST", "/api/echo/first", {"n": 1})
await asyncio.wait_for(job.done, 20)
json.dumps(job.id)
`);
  const done = await storedRecord(page, id, db);
  await page.close();
  const other = await context.newPage();
  await other.goto(`${baseURL}/pyjobq-worker.mjs`);
  await other.evaluate(async ([name, records]) => {
    const conn = await new Promise((resolve, reject) => {
      const r = indexedDB.open(name);
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    const tx = conn.transaction("jobs", "readwrite");
    for (const record of records) tx.objectStore("jobs").put(record);
    await new Promise((resolve, reject) => { tx.oncomplete = resolve; tx.onerror = () => reject(tx.error); });
    conn.close();
  }, [db, recordsOf(done)]);
  await other.close();
  return id;
}

async function runsOf(page) {
  return py(page, "json.dumps(runs)");
}

const overlaps = (x, y) => x.start < y.end && y.start < x.end;

test.afterEach(async ({ request }) => {
  await release(request); // never leave a handler thread blocked on a hold
});

test("two tabs: every job runs exactly once, and only one tab runs jobs at a time", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const a = await openQueuePage(context, baseURL);
  const b = await openQueuePage(context, baseURL);

  // Sample the lease while the jobs run: never more than one holder of the processor lock.
  const samples = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      samples.push(await a.evaluate(async (name) => {
        const s = await navigator.locks.query();
        return s.held.filter((l) => l.name === name).map((l) => l.clientId);
      }, LOCK));
      await new Promise((r) => setTimeout(r, 40));
    }
  })();

  // Three types, so runs overlap in time on the processing page; both tabs enqueue at once.
  const enqueue = (page, tab) => py(page, `
jobs = [queue.enqueue_fetch("POST", f"/api/slow?ms=400&job=${tab}{i}", {"i": i}, type=f"t{i}") for i in range(3)]
outs = await asyncio.wait_for(asyncio.gather(*(j.done for j in jobs)), 30)
json.dumps([[j.id, o.status] for j, o in zip(jobs, outs)])
`);
  const [fromA, fromB] = await Promise.all([enqueue(a, "a"), enqueue(b, "b")]);
  sampling = false;
  await sampler;
  for (const [, status] of [...fromA, ...fromB]) expect(status).toBe("done");

  const paths = ["a0", "a1", "a2", "b0", "b1", "b2"].map((j) => `/api/slow?ms=400&job=${j}`);
  const runsA = await runsOf(a);
  const runsB = await runsOf(b);
  const ranA = runsA.map((r) => r.path);
  const ranB = runsB.map((r) => r.path);
  // Each page ran each job at most once, no job ran on both pages, and together they ran all.
  expect(new Set(ranA).size).toBe(ranA.length);
  expect(new Set(ranB).size).toBe(ranB.length);
  expect(ranA.filter((p) => ranB.includes(p))).toEqual([]);
  expect([...ranA, ...ranB].sort()).toEqual([...paths].sort());
  // Runs did overlap on the processing page (the lanes) — but never across pages.
  const all = [...runsA, ...runsB];
  expect(all.some((x, i) => all.some((y, j) => i < j && overlaps(x, y)))).toBe(true);
  for (const x of runsA) for (const y of runsB) expect(overlaps(x, y), `${x.path} on A overlaps ${y.path} on B`).toBe(false);

  // The server answered each job exactly once.
  const log = await serverLog(request);
  expect(log.map((e) => e.path).sort()).toEqual([...paths].sort());

  // One lease holder at a time, and the lease was held while the jobs ran.
  expect(samples.length).toBeGreaterThan(5);
  for (const held of samples) expect(held.length).toBeLessThanOrEqual(1);
  expect(samples.some((held) => held.length === 1)).toBe(true);
});

test("closing the tab that runs a job: the other tab finishes it, counting the dead run", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const a = await openQueuePage(context, baseURL);
  const b = await openQueuePage(context, baseURL);
  const id = await py(a, `
job = queue.enqueue_fetch("POST", "/api/hold/closing", {"n": 1})
await job.stored
json.dumps(job.id)
`);
  await expect.poll(() => holding(request)).toEqual(["closing"]);
  const runningOnA = (await runsOf(a)).some((r) => r.path === "/api/hold/closing" && r.end === null);
  const [processor, survivor] = runningOnA ? [a, b] : [b, a];
  expect((await runsOf(survivor)).map((r) => r.path)).not.toContain("/api/hold/closing");
  expect(await record(survivor, id)).toMatchObject({ status: "running", attempts: 1 });

  await processor.close();
  await release(request, "closing"); // the dead page's request is answered into a closed socket

  const out = await outcome(survivor, id, 25);
  expect(out).toMatchObject({ status: "done", http_status: 200 });
  expect((await runsOf(survivor)).map((r) => r.path)).toEqual(["/api/hold/closing"]);
  expect(await record(survivor, id)).toMatchObject({ status: "done", attempts: 2 });
});

test("a delayed job survives a reload and completes on the reloaded page", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL);
  const id = await py(page, `
job = queue.enqueue_fetch("PUT", "/api/echo/reload", {"draft": "kept"}, delay_ms=3000, label="debounced save")
await job.stored
json.dumps(job.id)
`);
  const reloadedAt = Date.now();
  await page.reload();
  await harnessReady(page);
  expect((await serverLog(request)).filter((e) => e.path === "/api/echo/reload")).toEqual([]);
  await py(page, configurePython());

  const out = await outcome(page, id);
  expect(out.status).toBe("done");
  expect(out.result).toMatchObject({ method: "PUT", path: "/api/echo/reload", body: { draft: "kept" } });
  const all = await py(page, "json.dumps(await queue.query_all())");
  expect(all).toHaveLength(1);
  expect(all[0]).toMatchObject({
    id, status: "done", label: "debounced save",
    _params: { method: "PUT", path: "/api/echo/reload", body: { draft: "kept" } },
  });
  const log = (await serverLog(request)).filter((e) => e.path === "/api/echo/reload");
  expect(log).toHaveLength(1);
  expect(log[0].started * 1000).toBeGreaterThan(reloadedAt);
});

/** Go offline, file a job, and wait out `tries` offline tries: none counted, never failed. */
async function offlineJob(page, context, tries = 3) {
  // What "offline tries" needs: this tab's worker has booted and holds the lease. Going offline
  // before that tested a boot without network instead (a fresh clone's first run did).
  await workerReady(page);
  expect(await py(page, "str(queue._queue().lease_holder.holding)")).toBe("True");
  await context.setOffline(true);
  const id = await py(page, `
job = queue.enqueue_fetch("POST", "/api/echo/offline", {"n": 1}, max_attempts=2)
json.dumps(job.id)
`);
  // Three offline tries on the ladder (~1 s, ~2 s apart); the next one is >= 4 s on.
  await expect.poll(async () => {
    const rec = await record(page, id);
    expect(rec.status).not.toBe("failed");
    expect(rec.attempts).toBeLessThanOrEqual(1);
    return rec.given_back;
  }, { timeout: 60_000, intervals: [150] }).toBeGreaterThanOrEqual(tries);
  const rec = await record(page, id);
  expect(rec).toMatchObject({ status: "pending", attempts: 0, code: "offline" });
  expect(rec.next_retry_at - rec.updated_at).toBeGreaterThanOrEqual(3_500);
  return rec;
}

test("offline: failures cost no attempt, and the job completes once back online", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL);
  const { id } = await offlineJob(page, context); // max_attempts=2, yet three failed tries
  await context.setOffline(false);
  const out = await outcome(page, id);
  expect(out).toMatchObject({ status: "done", http_status: 200 });
  expect(await record(page, id)).toMatchObject({ status: "done", attempts: 1 });
  const log = (await serverLog(request)).filter((e) => e.path === "/api/echo/offline");
  expect(log.map((e) => e.status)).toEqual([200]);
});

// Spec: "capped, so the job re-checks by itself ... and sooner when [an online event] is".
// Chromium fires no `online` in the dedicated worker under setOffline; the page forwards its own.
// `unheard`: an `online` event no engine heard (a tab frozen through it; Chromium fires none in
// a worker under offline emulation): while a job waits out an offline failure the engine reads
// the network again every second (WATCH_MS), so the job runs about when the network is back,
// not at its ladder slot.
for (const { title, unheard } of [
  { title: "offline: the online event runs the waiting job before its next ladder slot", unheard: false },
  { title: "offline: a missed online event still runs the waiting job before its next ladder slot", unheard: true },
]) {
  test(title, async ({ context, baseURL, request }) => {
    await resetServer(request);
    const page = await openQueuePage(context, baseURL);
    // Four tries: the next ladder slot is >= 8 s away, far beyond what the online wake needs.
    const waiting = await offlineJob(page, context, 4);
    if (unheard) {
      // Neither the page nor its scheduler worker listens for the event any more.
      const workers = page.workers();
      expect(workers.length).toBe(1); // the scheduler worker
      expect(await py(page, "queue._queue().resources.unlisten_online() or 'unheard'")).toBe("unheard");
      expect(await workers[0].evaluate(() => self.pyodide.runPython(
        "from pyjobq.browser import worker_main\nworker_main._unlisten_online() or 'unheard'",
      ))).toBe("unheard");
    }
    await context.setOffline(false);
    expect((await outcome(page, waiting.id)).status).toBe("done");
    // It ran on the online event (or the engine's own look at the network), before the slot
    // the ladder had given it.
    expect((await record(page, waiting.id)).updated_at).toBeLessThan(waiting.next_retry_at);
  });
}

test("401 gives the attempt back and waits 60 s; with the right token the next job succeeds", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL);
  await page.evaluate(() => { window.token = "stale"; });
  const id = await py(page, `
job = queue.enqueue_fetch("POST", "/api/auth/first", {"n": 1}, max_attempts=1)
json.dumps(job.id)
`);
  await expect.poll(async () => (await record(page, id)).http_status).toBe(401);
  const rec = await record(page, id);
  expect(rec).toMatchObject({ status: "pending", attempts: 0, given_back: 1, code: "token_expired" });
  expect(rec.next_retry_at - rec.updated_at).toBeGreaterThanOrEqual(59_000);
  expect(rec.next_retry_at - rec.updated_at).toBeLessThanOrEqual(61_000);
  expect(rec.next_retry_at).toBeGreaterThanOrEqual(Date.now() + 55_000);

  // A refreshed token: the transport reads window.token on every replay.
  const tok = await request.post("/__control/token", { data: { token: "fresh" } });
  expect(tok.ok()).toBeTruthy();
  await page.evaluate(() => { window.token = "fresh"; });
  const second = await py(page, `
job2 = queue.enqueue_fetch("POST", "/api/auth/second", {"n": 2}, max_attempts=1)
_o = await asyncio.wait_for(job2.done, 20)
json.dumps({"status": _o.status, "http_status": _o.http_status, "result": _o.result})
`);
  expect(second).toMatchObject({ status: "done", http_status: 200, result: { path: "/api/auth/second" } });

  // The 401 job is still waiting out its 60 s, unfailed despite max_attempts=1, and was tried once.
  expect(await record(page, id)).toMatchObject({ status: "pending", attempts: 0 });
  const log = await serverLog(request);
  expect(log.filter((e) => e.path === "/api/auth/first").map((e) => e.status)).toEqual([401]);
});

test("403, 409 and 422 fail at once, on the first attempt, with the body's code", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL);
  const outs = await py(page, `
jobs = [queue.enqueue_fetch("POST", f"/api/status/{s}", {"s": s}, type=f"t{s}", max_attempts=5) for s in (403, 409, 422)]
_outs = await asyncio.wait_for(asyncio.gather(*(j.done for j in jobs)), 20)
_recs = {r["id"]: r for r in await queue.query_all()}
json.dumps([{"status": o.status, "http_status": o.http_status, "code": o.code, "error": o.error,
             "attempts": _recs[j.id]["attempts"], "rec_status": _recs[j.id]["status"],
             "params": _recs[j.id]["_params"]} for j, o in zip(jobs, _outs)])
`);
  for (const [i, s] of [403, 409, 422].entries()) {
    expect(outs[i]).toMatchObject({
      status: "failed", http_status: s, code: `status_${s}`, attempts: 1, rec_status: "failed",
      params: { method: "POST", path: `/api/status/${s}`, body: { s } },
    });
  }
  const log = await serverLog(request);
  expect(log.map((e) => e.path).sort()).toEqual(["/api/status/403", "/api/status/409", "/api/status/422"]);
});

// pyjobq stores no pending record without next_retry_at; another writer may: a pass reads such a
// record as due now, so it is sent rather than left pending for good.
test("a pending record stored by other code with no next_retry_at runs once its tab opens", async ({ context, baseURL, request }) => {
  await resetServer(request);
  await doneThenWritten(context, baseURL, (done) => {
    const copy = { ...done, id: "no-time", status: "pending", attempts: 0, result: null,
      http_status: null, updated_at: Date.now(),
      _params: { ...done._params, path: "/api/echo/no-time" } };
    delete copy.next_retry_at;
    return [copy];
  });
  const page = await openQueuePage(context, baseURL);
  await workerReady(page); // the boot's time is not the job's: a loaded machine boots slowly
  expect((await outcome(page, "no-time")).status).toBe("done");
  const log = (await serverLog(request)).filter((e) => e.path === "/api/echo/no-time");
  expect(log.map((e) => e.status)).toEqual([200]);
});

test("a job whose reconstructor is not registered fails as orphaned, naming it", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL);
  const out = await py(page, `
job = queue.enqueue_persistent("thumbnail", {"src": "photo.png", "size": 128})
_o = await asyncio.wait_for(job.done, 20)
_rec = [r for r in await queue.query_all() if r["id"] == job.id][0]
json.dumps({"status": _o.status, "code": _o.code, "error": _o.error, "attempts": _rec["attempts"], "params": _rec["_params"]})
`);
  expect(out).toMatchObject({ status: "failed", code: "orphaned", attempts: 1, params: { src: "photo.png", size: 128 } });
  expect(out.error).toContain("thumbnail");
});

test("types run side by side while each type stays serial", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL);
  await py(page, `
lane_jobs = [queue.enqueue_fetch("POST", f"/api/hold/{k}", {"k": k}, type=k[0]) for k in ("a1", "a2", "b1", "b2")]
"ok"
`);
  const held = async () => (await holding(request)).sort();
  await expect.poll(held).toEqual(["a1", "b1"]);
  await page.waitForTimeout(600);
  expect(await held()).toEqual(["a1", "b1"]); // a2 waits behind a1, though type b is running

  await release(request, "a1");
  await expect.poll(held).toEqual(["a2", "b1"]);
  await release(request, "b1");
  await expect.poll(held).toEqual(["a2", "b2"]);
  await release(request, "a2");
  await release(request, "b2");
  const statuses = await py(page, `
_outs = await asyncio.wait_for(asyncio.gather(*(j.done for j in lane_jobs)), 20)
json.dumps([o.status for o in _outs])
`);
  expect(statuses).toEqual(["done", "done", "done", "done"]);

  const log = await serverLog(request);
  const span = (k) => {
    const e = log.filter((x) => x.path === `/api/hold/${k}`);
    expect(e).toHaveLength(1);
    return { start: e[0].started, end: e[0].time };
  };
  expect(overlaps(span("a1"), span("a2"))).toBe(false);
  expect(overlaps(span("b1"), span("b2"))).toBe(false);
  expect(overlaps(span("a1"), span("b1"))).toBe(true);
  expect(overlaps(span("a2"), span("b1"))).toBe(true);
});

test("with no transport configured the job fails saying how to configure one", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL, { transport: false });
  const out = await py(page, `
job = queue.enqueue_fetch("POST", "/api/echo/none", {"n": 1}, max_attempts=1)
_o = await asyncio.wait_for(job.done, 20)
json.dumps({"status": _o.status, "code": _o.code, "error": _o.error})
`);
  expect(out).toMatchObject({ status: "failed", code: "no_transport" });
  expect(out.error).toContain("configure(transport=");
  expect(out.error).toMatch(/async def send\(method, path, body\)/);
  expect(await serverLog(request)).toEqual([]);
});

test("delete_job ends a running job as cancelled/deleted; cleanup_old keeps failed and cancelled records", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL);
  const ids = await py(page, `
j_run = queue.enqueue_fetch("POST", "/api/hold/deleted", {"n": 1}, type="d")
j_next = queue.enqueue_fetch("POST", "/api/echo/next", {"n": 2}, type="d")
j_fail = queue.enqueue_fetch("POST", "/api/status/409", {"n": 3}, type="f")
j_cancel = queue.enqueue_fetch("POST", "/api/echo/later", {"n": 4}, type="c", delay_ms=600_000)
await asyncio.gather(j_run.stored, j_next.stored, j_fail.stored, j_cancel.stored)
json.dumps({"run": j_run.id, "next": j_next.id, "fail": j_fail.id, "cancel": j_cancel.id})
`);
  await expect.poll(() => holding(request)).toEqual(["deleted"]);
  const deleted = await py(page, `
_existed = await queue.delete_job(j_run.id)
_o = await asyncio.wait_for(j_run.done, 10)
json.dumps({"existed": _existed, "status": _o.status, "code": _o.code})
`);
  expect(deleted).toEqual({ existed: true, status: "cancelled", code: "deleted" });
  // The run was ended on the page (its request was abandoned), and its lane freed:
  // the next job of its type completes while the server still holds the deleted one's request.
  await expect.poll(async () => (await runsOf(page)).find((r) => r.path === "/api/hold/deleted").end).not.toBeNull();
  expect((await outcome(page, ids.next)).status).toBe("done");
  expect(await holding(request)).toEqual(["deleted"]);
  expect(await record(page, ids.run)).toBeNull();
  expect((await outcome(page, ids.fail)).status).toBe("failed");
  expect(await py(page, `json.dumps(await queue.cancel_job(j_cancel.id))`)).toBe(true);

  // Age copies of the done, failed and cancelled records past the 7-day retention.
  const eightDaysAgo = Date.now() - 8 * 24 * 3600 * 1000;
  await page.evaluate(async ({ ids, at }) => {
    const db = await new Promise((resolve, reject) => {
      const r = indexedDB.open("ui-jobs");
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    const read = db.transaction("jobs").objectStore("jobs");
    const get = (id) => new Promise((resolve) => { const q = read.get(id); q.onsuccess = () => resolve(q.result); });
    const originals = await Promise.all([ids.next, ids.fail, ids.cancel].map(get));
    const tx = db.transaction("jobs", "readwrite");
    for (const rec of originals) {
      tx.objectStore("jobs").put({ ...rec, id: `old-${rec.status}`, created_at: at, updated_at: at });
    }
    await new Promise((resolve, reject) => { tx.oncomplete = resolve; tx.onerror = () => reject(tx.error); });
    db.close();
  }, { ids, at: eightDaysAgo });

  expect(await py(page, "json.dumps(await queue.cleanup_old())")).toBe(1);
  const left = await py(page, `json.dumps({r["id"]: [r["status"], r["_params"]] for r in await queue.query_all()})`);
  expect(Object.keys(left).sort()).toEqual([ids.cancel, ids.fail, ids.next, "old-cancelled", "old-failed"].sort());
  expect(left["old-failed"]).toEqual(["failed", { method: "POST", path: "/api/status/409", body: { n: 3 } }]);
  expect(left["old-cancelled"]).toEqual(["cancelled", { method: "POST", path: "/api/echo/later", body: { n: 4 } }]);
});

test("a queue configured to keep done jobs a day and failed ones 30 days sweeps each past its days in the worker", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const day = 24 * 3600 * 1000;
  const id = await doneThenWritten(context, baseURL, (done) => {
    const now = Date.now();
    const aged = (id, status, ageDays) => ({ ...done, id, status, updated_at: now - ageDays * day,
      created_at: now - ageDays * day, error: status === "failed" ? "no" : null, code: null });
    return [aged("failed-old", "failed", 31), aged("failed-new", "failed", 29),
            aged("done-old", "done", 2), aged("done-new", "done", 0.5)];
  });
  const page = await openQueuePage(context, baseURL, { extra: "keep_done_days=1, keep_failed_days=30" });
  await workerReady(page);
  await expect.poll(async () => py(page, "json.dumps(sorted(r['id'] for r in await queue.query_all()))"),
    { timeout: 20_000 }).toEqual([id, "done-new", "failed-new"].sort());
});

test("the queue asks the browser once, when a job is stored, to persist the origin's storage, and storage() says the state", async ({ context, baseURL, request }) => {
  await resetServer(request);
  await context.addInitScript(() => {
    window.persistCalls = 0;
    const persist = navigator.storage.persist.bind(navigator.storage);
    navigator.storage.persist = () => { window.persistCalls += 1; return persist(); };
  });
  const page = await openQueuePage(context, baseURL);
  await workerReady(page);
  expect(await page.evaluate(() => window.persistCalls)).toBe(0); // no job yet: nothing asked
  await py(page, `
for n in range(2):
    await asyncio.wait_for(queue.enqueue_fetch("POST", "/api/echo/kept", {"n": n}).done, 20)
"ok"`);
  await expect.poll(() => page.evaluate(() => window.persistCalls)).toBe(1);
  const state = await py(page, `
_s = await queue.storage()
json.dumps({"persisted": _s.persisted, "usage": _s.usage_bytes, "quota": _s.quota_bytes})`);
  expect(state.persisted).toBe(await page.evaluate(() => navigator.storage.persisted()));
  expect(state.usage).toBeGreaterThan(0);
  expect(state.quota).toBeGreaterThan(state.usage);
});
