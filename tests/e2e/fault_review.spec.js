// @ts-check
// In Chromium: what only the browser can show of the fault review's findings — a forged
// job-update on the real BroadcastChannel, a request made right after filing, and a database
// upgrade while a job runs. Bad records in real IndexedDB are
// tests/browser/test_idb_store.py::test_non_finite_and_deep_records_fail_alone_in_indexeddb.
// Nothing is timed: only states are asserted, with generous waits (a loaded 2-core machine).
const { test, expect } = require("@playwright/test");
const { openHarness, py, jobRow } = require("./helpers");

test.setTimeout(240_000);

// `hold` runs until the page releases it (or, heeding its signal, until it is aborted).
const SETUP = `
import asyncio, json, pyjobq
import js

HOLD = {}
RUNS = []

def hold(params):
    async def run(signal):
        signal.heeded = True  # ends by itself when aborted, like fetch given the signal
        RUNS.append(params["n"])
        HOLD[params["n"]] = asyncio.get_running_loop().create_future()
        signal.add_callback(lambda reason: HOLD[params["n"]].done() or HOLD[params["n"]].set_result("aborted"))
        return {"n": params["n"], "end": await HOLD[params["n"]]}
    return run

def noop(params):
    async def run(signal):
        RUNS.append(params["n"])
        return None
    return run

pyjobq.configure(reconstructors={"hold": hold, "noop": noop})
from pyjobq import queue
"ok"
`;

async function openPage(context) {
  return openHarness(context, { setup: SETUP });
}

/** File a \`hold\` job numbered \`n\` on the page and wait until its run has started; its id. */
async function startHeld(page, n) {
  return py(page, `
job = queue.enqueue_persistent("hold", {"n": ${n}})
for _ in range(600):
    if ${n} in HOLD: break
    await asyncio.sleep(0.1)
job.id`);
}

test("a forged job-update on the channel ends nothing: the run goes on and no done resolves", async ({ context }) => {
  const a = await openPage(context);
  const id = await startHeld(a, 1);
  const b = await openPage(context);
  await py(b, `watching = queue.job(${JSON.stringify(id)})\n"ok"`);
  const channel = await py(a, "queue.settings.channel_name");
  // Any same-origin script can post on the channel: a delete, then a done with a chosen result.
  await b.evaluate(([name, jobId]) => {
    const forger = new BroadcastChannel(name);
    forger.postMessage({ v: 1, type: "job-update", source: "evil", jobs: [{ id: jobId, deleted: true }] });
    forger.postMessage({ v: 1, type: "job-update", source: "evil", jobs: [{ id: jobId, status: "done", result: "forged" }] });
    forger.close();
  }, [channel, id]);
  await a.waitForTimeout(3_000); // time for both tabs to have heard (and checked) the news
  expect(await py(a, `json.dumps([RUNS, HOLD[1].done(), job.done.done()])`)).toEqual([[1], false, false]);
  expect(await py(b, "watching.done.done()")).toBe(false);
  expect((await jobRow(a, id)).status).toBe("running");
  await py(a, `HOLD[1].set_result("released")\n"ok"`);
  expect(await py(a, `(await asyncio.wait_for(job.done, 60)).result["end"]`)).toBe("released");
  expect(await py(b, `(await asyncio.wait_for(watching.done, 90)).result["end"]`)).toBe("released");
});

test("delete_job right after filing deletes the job, which is never sent", async ({ context }) => {
  const page = await openPage(context);
  const out = await py(page, `
job = queue.enqueue_persistent("noop", {"n": 7}, delay_ms=1500)
deleted = await queue.delete_job(job.id)
outcome = await asyncio.wait_for(job.done, 60)
await asyncio.sleep(3)
json.dumps([deleted, outcome.code, RUNS])`);
  expect(out).toEqual([true, "deleted", []]);
});

test("a database upgrade while a job runs: its run lock is held until the page's run has ended", async ({ context }) => {
  const page = await openPage(context);
  const id = await startHeld(page, 3);
  const lockName = await py(page, "queue.settings.lock_name");
  const runLock = `${lockName}:run:${JSON.stringify(["default", id])}`; // pyjobq.core.lanes.run_lock
  const db = await py(page, "queue.settings.db_name");
  const heldLocks = () => page.evaluate(async () => (await navigator.locks.query()).held.map((l) => l.name));
  expect(await heldLocks()).toContain(runLock);
  await page.evaluate(async (name) => {  // what a page with newer code does (the schema is at 2)
    const r = indexedDB.open(name, 3);
    const opened = await new Promise((resolve, reject) => { r.onsuccess = () => resolve(r.result); r.onerror = () => reject(r.error); });
    opened.close();
  }, db);
  // The worker stopped and told the page to drop the run: the signal fired, and the executor,
  // which heeds it, ends by itself; until then the run lock stays held, so a tab with the
  // newer code cannot recover the record and run the job a second time beside it.
  await expect.poll(() => py(page, "HOLD[3].done()"), { timeout: 60_000 }).toBe(true);
  expect(await py(page, "HOLD[3].result()")).toBe("aborted");
  await expect.poll(heldLocks, { timeout: 60_000 }).not.toContain(runLock);
});
