// @ts-check
// In a real Chromium: the outbox on IndexedDBStore (stored before start(), FIFO across
// types one at a time) and the lease holder's automatic retention sweep.
const { test, expect } = require("@playwright/test");
const { openQueuePage, workerReady, storedRecord, py, resetServer, serverLog, holding, release } = require("./helpers");

async function openHarness(context, baseURL) {
  await context.route((url) => !url.href.startsWith(baseURL), (route) => route.abort("internetdisconnected"));
  const page = await context.newPage();
  page.on("console", (msg) => { if (msg.type() === "error") console.log(`[page error] ${msg.text()}`); });
  await page.goto("/tests/harness.html");
  await page.waitForFunction(() => window.pyReady === true, null, { timeout: 30_000 });
  return page;
}

test("an outbox on IndexedDB stores entries before start() and sends them FIFO across types, one at a time",
  async ({ context, baseURL, request }) => {
    await resetServer(request);
    const page = await openHarness(context, baseURL);
    const ids = await py(page, `
import asyncio, json
from pyodide.http import pyfetch
from pyjobq import Outbox
from pyjobq.browser.idb import IndexedDBStore

async def api(entry):
    # The message m1 is held by the server until the test lets it go.
    path = "/api/hold/m1" if entry.payload == "m1" else f"/api/echo/{entry.type}/{entry.payload}"
    response = await pyfetch(path, method="POST")
    if not response.ok:
        raise RuntimeError(f"HTTP {response.status}")

box = Outbox(IndexedDBStore("outbox-issue15"), {"msg/send": {"process": api}, "msg/react": {"process": api}})
jobs = []
for kind, payload in [("msg/send", "m1"), ("msg/react", "r1"), ("msg/send", "m2"), ("msg/react", "r2")]:
    jobs.append(await asyncio.wait_for(box.enqueue(kind, payload), 10))  # stopped: stored at once
json.dumps([j.id for j in jobs])
`);
    // Stored in IndexedDB before start(), nothing sent.
    for (const id of ids) {
      expect((await storedRecord(page, id, "outbox-issue15")).status).toBe("pending");
    }
    expect((await serverLog(request)).filter((r) => r.path.startsWith("/api/"))).toEqual([]);

    await py(page, "box.start()\n'ok'");
    await expect.poll(async () => holding(request)).toEqual(["m1"]);
    // The reaction waits for its message, however long the server takes with it.
    await page.waitForTimeout(1000);
    expect((await serverLog(request)).filter((r) => r.path.startsWith("/api/echo"))).toEqual([]);
    expect((await storedRecord(page, ids[1], "outbox-issue15")).status).toBe("pending");

    await release(request, "m1");
    const statuses = await py(page, `
outs = await asyncio.wait_for(asyncio.gather(*[j.done for j in jobs]), 30)
json.dumps([o.status for o in outs])
`);
    expect(statuses).toEqual(["done", "done", "done", "done"]);
    const log = (await serverLog(request)).filter((r) => r.path.startsWith("/api/"));
    expect(log.map((r) => r.path)).toEqual(["/api/hold/m1", "/api/echo/msg/react/r1", "/api/echo/msg/send/m2",
      "/api/echo/msg/react/r2"]);
    for (const id of ids) expect(await storedRecord(page, id, "outbox-issue15")).toBeNull(); // success deletes
    await py(page, "box.stop()\n'ok'");
  });

test("the lease holder sweeps done records older than 7 days by itself, publishes it, and keeps everything else",
  async ({ context, baseURL }) => {
    const a = await openQueuePage(context, baseURL);
    await workerReady(a); // A holds the lease
    // A job run to its end: A's scheduler has made a pass, whose first look swept the empty
    // store, so the old records below are the next sweep's, not this one's.
    expect(await py(a, `(await asyncio.wait_for(queue.enqueue_fetch("POST", "/api/echo/first-pass").done, 60)).status.value`)).toBe("done");
    await py(a, `
from pyjobq.browser.idb import IndexedDBStore
from pyjobq.core.records import NewJob
from pyjobq.core.status import Status
import js
now = float(js.Date.now())
day = 24 * 3600 * 1000.0
def rec(job_id, status, age_days):
    new = NewJob(id=job_id, reconstructor="fetch", params={"method": "POST", "path": "/x", "body": None})
    return new.to_record(now - age_days * day).evolve(status=Status(status), updated_at=now - age_days * day,
                                                      next_retry_at=None)
await IndexedDBStore("ui-jobs").add([rec("done-old", "done", 8), rec("done-new", "done", 1),
                                    rec("failed-old", "failed", 30), rec("cancelled-old", "cancelled", 30)])
'ok'`);
    const b = await openQueuePage(context, baseURL); // waits in line for the lease
    expect(await storedRecord(b, "done-old")).not.toBeNull();
    await a.close(); // B takes the lease: its first pass sweeps, with no call from the app
    await workerReady(b);
    await expect.poll(async () => storedRecord(b, "done-old"), { timeout: 60_000 }).toBeNull();
    for (const kept of ["done-new", "failed-old", "cancelled-old"]) {
      expect(await storedRecord(b, kept)).not.toBeNull();
    }
    // Published: B's open table heard the deletion.
    await expect.poll(async () => py(b, `json.dumps([u["id"] for u in updates if u.get("deleted")])`))
      .toEqual(["done-old"]);
  });
