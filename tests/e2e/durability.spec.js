// @ts-check
// Durability at the two moments the spec names, tested by killing the engine right there.
//
//   - A claim is committed before its `run` is posted: the moment `run` reaches the page, the
//     page keeps it from the executor, terminates the scheduler worker and reads the record
//     from IndexedDB. It must already be `running` with the attempt counted; the tab is then
//     crashed and a second tab recovers the job, counting the dead run (ceiling respected).
//   - A settle is committed before `done` resolves: in the `done` callback, before anything
//     else, the page terminates the worker and reads the record. It must already be `done`;
//     the tab is then crashed and no tab may run the job again.
//
// Why this can fail: `worker.terminate()` called from the message (or done) callback kills
// the worker wherever it stands, and IndexedDB aborts a transaction whose connection closes
// before it committed. An engine that posted `run` (or published the job-update that resolves
// `done`) before its transaction committed would lose that write here: the read would show
// `pending` with no attempt (or `running`), the recovered job would run with attempts 1, and
// the settled one would be recovered and sent to the server a second time. (The read alone
// would not do: a readonly transaction waits for a readwrite one created before it, so
// without the kill it could see a write still in flight.) Nothing here measures time.
const { test, expect } = require("@playwright/test");
const { crashTab, openQueuePage, workerReady, py, resetServer, serverLog, storedRecord } = require("./helpers");

const DB = "ui-jobs"; // helpers' configurePython() keeps the default database

// Runs in every page of the context before its own scripts: pyjobq's scheduler worker (the
// Blob-URL Worker whose #hash names the database, as web/bench/traced-worker.mjs recognises
// it) gets a first `message` listener, which runs before pyjobq's own.
function instrument() {
  const d = {
    workers: [], db: null, holdRunOf: null, held: null, seen: undefined,
    /** Open this page's own connection (once the queue has created the database). */
    open(name) {
      return new Promise((resolve, reject) => {
        const r = indexedDB.open(name);
        r.onsuccess = () => { d.db = r.result; resolve(d.db.version); };
        r.onerror = () => reject(r.error);
      });
    },
    /** The engine dies here: every scheduler worker of this page, terminated at once. */
    kill() { for (const w of d.workers) w.terminate(); },
    /** Start a read of the record now (in this task), and keep what it finds in `seen`. */
    readNow(id) {
      const q = d.db.transaction("jobs").objectStore("jobs").get(id);
      q.onsuccess = () => { d.seen = q.result ?? null; };
      q.onerror = () => { d.seen = { error: String(q.error) }; };
    },
  };
  window.durability = d;
  const Real = window.Worker;
  window.Worker = class extends Real {
    constructor(url, options) {
      super(url, options);
      if (!String(url).includes("#db=")) return;
      d.workers.push(this);
      this.addEventListener("message", (event) => {
        if (d.holdRunOf === null || typeof event.data !== "string") return;
        let msg;
        try { msg = JSON.parse(event.data); } catch { return; }
        if (!msg || msg.type !== "run" || msg.job_id !== d.holdRunOf) return;
        event.stopImmediatePropagation(); // the page's executor never hears of this run
        d.holdRunOf = null;
        d.held = { job_id: msg.job_id, attempt: msg.attempt, claim: msg.claim };
        d.kill();
        d.readNow(msg.job_id);
      });
    }
  };
}

async function crash(context, page) {
  await crashTab(context, page);
  await page.close().catch(() => {});
}

/** A first tab holding the lease, its queue warm, with its own connection to the database. */
async function firstTab(context, baseURL, request) {
  await resetServer(request);
  await context.addInitScript(instrument);
  const a = await openQueuePage(context, baseURL);
  await workerReady(a);
  expect(await py(a, `(await asyncio.wait_for(queue.enqueue_fetch("POST", "/api/echo/warm", None).done, 30)).status`))
    .toBe("done"); // the database exists now: opening it from the page creates nothing
  expect(await a.evaluate((name) => window.durability.open(name), DB)).toBe(2); // schema version 2
  expect(await a.evaluate(() => window.durability.workers.length)).toBe(1);
  return a;
}

const requestsTo = async (request, path) => (await serverLog(request)).filter((r) => r.path === path);

test("a claim is committed before its run is posted: killed at run, the record is running, and the next tab counts the dead run", async ({ context, baseURL, request }) => {
  const a = await firstTab(context, baseURL, request);
  const id = await py(a, `
job = queue.enqueue_fetch("POST", "/api/echo/durable-claim", {"n": 1}, max_attempts=2)
js.durability.holdRunOf = job.id   # before any await: its run cannot have come yet
job.id`);
  await a.waitForFunction(() => window.durability.seen !== undefined);
  const { held, seen } = await a.evaluate(() => ({ held: window.durability.held, seen: window.durability.seen }));
  expect(held.job_id).toBe(id);
  // Committed before `run` left the worker: running, its attempt counted, as `run` says.
  expect(seen).toMatchObject({ id, status: "running", attempts: 1, max_attempts: 2 });
  expect(held.attempt).toBe(seen.attempts);
  await crash(context, a);
  expect(await requestsTo(request, "/api/echo/durable-claim")).toHaveLength(0); // never ran

  // A second tab takes the lease, recovers the running record (the dead run spent an attempt)
  // and runs it once, with its last allowed attempt.
  const b = await openQueuePage(context, baseURL);
  expect(await py(b, `(await asyncio.wait_for(queue.job(${JSON.stringify(id)}).done, 60)).status`)).toBe("done");
  expect(await storedRecord(b, id, DB)).toMatchObject({ status: "done", attempts: 2, max_attempts: 2 });
  expect(await requestsTo(request, "/api/echo/durable-claim")).toHaveLength(1);
});

test("a claim at the ceiling: killed at run, the next tab fails it rather than run it again", async ({ context, baseURL, request }) => {
  const a = await firstTab(context, baseURL, request);
  const id = await py(a, `
job = queue.enqueue_fetch("POST", "/api/echo/durable-last", {"n": 1}, max_attempts=1)
js.durability.holdRunOf = job.id
job.id`);
  await a.waitForFunction(() => window.durability.seen !== undefined);
  expect(await a.evaluate(() => window.durability.seen)).toMatchObject({ id, status: "running", attempts: 1, max_attempts: 1 });
  await crash(context, a);

  const b = await openQueuePage(context, baseURL);
  const out = await py(b, `
out = await asyncio.wait_for(queue.job(${JSON.stringify(id)}).done, 60)
json.dumps({"status": out.status, "code": out.code})`);
  expect(out.status).toBe("failed"); // its one attempt went with the crashed tab
  expect(await storedRecord(b, id, DB)).toMatchObject({ status: "failed", attempts: 1 });
  expect(await requestsTo(request, "/api/echo/durable-last")).toHaveLength(0);
});

test("a settle is committed before done resolves: killed in the done callback, the record is done, and no tab runs it again", async ({ context, baseURL, request }) => {
  const a = await firstTab(context, baseURL, request);
  const id = await py(a, `
job = queue.enqueue_fetch("POST", "/api/echo/durable-settle", {"n": 1})

def at_done(_future):
    # The first thing done's callback does: the engine dies, the record is read.
    js.durability.kill()
    js.durability.readNow(job.id)

job.done.add_done_callback(at_done)
job.id`);
  await a.waitForFunction(() => window.durability.seen !== undefined);
  expect(await a.evaluate(() => window.durability.seen)).toMatchObject({ id, status: "done", attempts: 1 });
  expect(await py(a, `(await job.done).status`)).toBe("done");
  await crash(context, a);

  // The next tab takes the lease and makes a whole pass (recovery included) before its own
  // job is done: by then it would have recovered and re-run a record left running.
  const b = await openQueuePage(context, baseURL);
  expect(await py(b, `(await asyncio.wait_for(queue.enqueue_fetch("POST", "/api/echo/after-settle", None).done, 60)).status`))
    .toBe("done");
  // Left running, it would be pending, running or done with attempts 2 by now.
  expect(await storedRecord(b, id, DB)).toMatchObject({ status: "done", attempts: 1 });
  expect(await requestsTo(request, "/api/echo/durable-settle")).toHaveLength(1);
});
