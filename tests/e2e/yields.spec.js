// @ts-check
// Yielding in Chromium (spec: "Yielding: persistent work that pauses while a lock is held"):
// tab B steals the yield lock from a heavy_decode job running in tab A; the job stops, is
// parked as paused in both tabs, and finishes once B lets go — with its interrupted attempt
// given back. And volatile jobs (spec: "Where jobs run"): seen only by the tab that made them.
const { test, expect } = require("@playwright/test");
const { openQueuePage, py } = require("./helpers");

const FOREGROUND = "app-foreground-priority";

// A registered reconstructor whose executor works for STEPS × 0.1 s, checking its signal
// each step. `steps` counts the steps this page did; `starts` counts the runs it began.
// STEPS is read when a run starts: long enough that the first run outlasts opening tab B
// (a second Pyodide on a shared machine), then short for the run after the release.
const DECODER = `
STEPS = 3000
steps = 0
starts = 0

def decode_factory(params):
    async def run(signal):
        global steps, starts
        starts += 1
        for _ in range(STEPS):
            signal.raise_if_aborted()
            await asyncio.sleep(0.1)
            steps += 1
        return {"decoded": params["take"]}
    return run
`;
const OPTIONS = {
  reconstructors: DECODER,
  extra: `, reconstructors={"decode": decode_factory}, yields={"heavy_decode": "${FOREGROUND}"}`,
};

/** The job's statuses this page heard in job-updates, in order. */
async function heard(page, id) {
  return py(page, `json.dumps([u["status"] for u in updates if u["id"] == ${JSON.stringify(id)}])`);
}

/** The job's record as query_all() on this page returns it, or null. */
async function record(page, id) {
  return py(page, `
_recs = [r for r in await queue.query_all() if r["id"] == ${JSON.stringify(id)}]
json.dumps(_recs[0] if _recs else None)
`);
}

/** Every record in this origin's IndexedDB (the default database name: helpers configure none). */
async function idbRecords(page) {
  return page.evaluate(async () => {
    const db = await new Promise((resolve, reject) => {
      const r = indexedDB.open("ui-jobs");
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    try {
      if (!db.objectStoreNames.contains("jobs")) return [];
      return await new Promise((resolve) => {
        const q = db.transaction("jobs").objectStore("jobs").getAll();
        q.onsuccess = () => resolve(q.result);
      });
    } finally {
      db.close();
    }
  });
}

test("a steal from another tab parks a running heavy_decode job; it finishes after release with one attempt", async ({ context, baseURL }) => {
  test.setTimeout(120_000);
  const a = await openQueuePage(context, baseURL, OPTIONS);
  // Enqueued before B exists, so A holds the processor lease and runs it.
  const id = await py(a, `
job = queue.enqueue_persistent("decode", {"take": 1}, type="heavy_decode", label="decode take 1", max_attempts=1)
await asyncio.wait_for(job.stored, 60)
json.dumps(job.id)
`);
  await expect.poll(() => heard(a, id), { timeout: 60_000 }).toContain("running");
  const b = await openQueuePage(context, baseURL, OPTIONS);
  await expect.poll(() => py(a, "steps"), { timeout: 10_000 }).toBeGreaterThanOrEqual(3);

  // While it runs, A's page holds the yield lock in shared mode.
  const locks = await a.evaluate(async (name) => {
    const s = await navigator.locks.query();
    return s.held.filter((l) => l.name === name).map((l) => l.mode);
  }, FOREGROUND);
  expect(locks).toEqual(["shared"]);
  expect(await record(a, id)).toMatchObject({ status: "running", attempts: 1 });

  // Foreground work in B takes the lock exclusively, stealing it from the job.
  await b.evaluate((name) => {
    const hold = new Promise((resolve) => { window.releaseForeground = resolve; });
    window.foreground = navigator.locks.request(name, { steal: true }, () => hold);
  }, FOREGROUND);

  await expect.poll(() => heard(a, id), { timeout: 10_000 }).toContain("paused");
  await expect.poll(() => heard(b, id), { timeout: 10_000 }).toContain("paused");
  const parked = await record(b, id);
  expect(parked).toMatchObject({ status: "paused", yield_lock: FOREGROUND, attempts: 0, given_back: 1 });
  expect(parked.error).toContain(FOREGROUND); // "aborted: yield lock … was taken"
  // The executor really stopped: no more steps while B holds the lock.
  const stoppedAt = await py(a, "steps");
  expect(stoppedAt).toBeLessThan(3000);
  await a.waitForTimeout(800);
  expect(await py(a, "steps")).toBe(stoppedAt);
  expect(await py(a, "starts") + await py(b, "starts")).toBe(1);
  expect(await py(a, `str(job.done.done())`)).toBe("False");

  // B lets go: the job resumes without any timer and completes (on whichever tab holds the lease).
  for (const page of [a, b]) await py(page, "STEPS = 20\n'ok'");
  await b.evaluate(() => window.releaseForeground());
  const outcome = await py(a, `
_o = await asyncio.wait_for(job.done, 60)
json.dumps({"status": _o.status, "result": _o.result, "error": _o.error})
`);
  expect(outcome).toEqual({ status: "done", result: { decoded: 1 }, error: null });
  const done = await record(a, id);
  // max_attempts=1, two runs: the interrupted attempt cost nothing.
  expect(done).toMatchObject({ status: "done", attempts: 1, given_back: 1, yield_lock: null });
  expect(await py(a, "starts") + await py(b, "starts")).toBe(2);
  await expect.poll(() => heard(b, id), { timeout: 10_000 }).toContain("done");
  expect(await heard(b, id)).toEqual(expect.arrayContaining(["paused", "pending", "running", "done"]));
});

test("a volatile job runs in its tab only: listed there as volatile, unseen elsewhere, not in IndexedDB", async ({ context, baseURL }) => {
  test.setTimeout(120_000); // two Pyodide pages and their workers on a shared 2-core machine
  const a = await openQueuePage(context, baseURL);
  const b = await openQueuePage(context, baseURL);
  const id = await py(a, `
release_thumbnail = asyncio.Event()

async def make_thumbnail(signal):
    await release_thumbnail.wait()
    return {"w": 64}

vjob = queue.enqueue(make_thumbnail, label="thumbnail 7")
json.dumps(vjob.id)
`);
  // Listed in its own tab while it is unfinished; a finished one is forgotten once published.
  await expect.poll(async () => (await record(a, id))?.status, { timeout: 10_000 }).toBe("running");
  expect(await record(a, id)).toMatchObject({ status: "running", label: "thumbnail 7", volatile: true, attempts: 1 });
  const out = await py(a, `
release_thumbnail.set()
_o = await asyncio.wait_for(vjob.done, 30)
json.dumps({"id": vjob.id, "status": _o.status, "result": _o.result})
`);
  expect(out).toMatchObject({ id, status: "done", result: { w: 64 } });
  expect(await heard(a, out.id)).toEqual(["pending", "running", "done"]);
  expect(await record(a, out.id)).toBeNull();

  // A persistent job from A does reach B: B is listening, yet never heard of the volatile one.
  await py(a, `
pjob = queue.enqueue_fetch("GET", "/api/echo/ping")
await asyncio.wait_for(pjob.done, 30)
"ok"
`);
  const pid = await py(a, "json.dumps(pjob.id)");
  await expect.poll(() => heard(b, pid), { timeout: 10_000 }).toContain("done");
  expect(await heard(b, out.id)).toEqual([]);
  expect(await record(b, out.id)).toBeNull();

  const stored = await idbRecords(a);
  expect(stored.map((r) => r.id)).toContain(pid);
  expect(stored.map((r) => r.id)).not.toContain(out.id);
  expect(stored.filter((r) => r.label === "thumbnail 7")).toEqual([]);
});
