// @ts-check
// A tab that opens the queue runs it, and a tab waiting for the lease costs no second Pyodide:
// - a job stored with delay_ms survives a hard reload and is sent once by a page that only
//   imports the queue;
// - a tab that only imported the queue takes over a job whose tab was closed mid-run, and the
//   dead run's attempt counts;
// - a waiting tab's worker has no Pyodide, yet the tab stores, queries and deletes at once (its
//   delete ends a run in the other tab); when the holder closes it loads Pyodide and drains.
const { test, expect: baseExpect } = require("@playwright/test");
const { openQueuePage, workerReady, py, resetServer, serverLog, holding, release, storedRecord, harnessReady, openServerOnlyHarness, workerHasPyodide } = require("./helpers");

const expect = baseExpect.configure({ timeout: 60_000 });

/** Configure a transport — importing pyjobq for configure() starts nothing. */
const CONFIGURE = `
import json, asyncio, pyjobq
from pyodide.http import pyfetch

async def send(method, path, body):
    kw = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"}, **kw)

pyjobq.configure(transport=send)
"configured"
`;

/** Configure, then import the queue — nothing else: no call into the queue. */
const ONLY_IMPORT = `${CONFIGURE}
from pyjobq import queue
"imported"
`;

test.afterEach(async ({ request }) => {
  await release(request); // never leave a handler thread blocked on a hold
});

test("a delayed job survives a hard reload and is sent once by a page that only imports the queue", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openServerOnlyHarness(context, /** @type {string} */ (baseURL));
  await py(page, ONLY_IMPORT);
  const id = await py(page, `
job = queue.enqueue_fetch("POST", "/api/echo/reload-debounced", {"text": "v1"}, delay_ms=4000, group="doc-1")
await asyncio.wait_for(job.stored, 30)
job.id`);
  await page.reload(); // long before the delay has passed
  await harnessReady(page);
  expect(await storedRecord(page, id)).toMatchObject({ status: "pending" });
  expect(await py(page, CONFIGURE)).toBe("configured");
  expect(page.workers().filter((w) => w.url().includes("#db="))).toEqual([]); // configure() starts nothing
  expect(await py(page, "from pyjobq import queue\n'imported'")).toBe("imported");

  await expect.poll(async () => (await storedRecord(page, id))?.status, { intervals: [250] }).toBe("done");
  const sent = (await serverLog(request)).filter((r) => r.path === "/api/echo/reload-debounced");
  expect(sent).toHaveLength(1);
  expect(await storedRecord(page, id)).toMatchObject({ status: "done", attempts: 1, _params: { body: { text: "v1" } } });
});

test("a tab that only imported the queue finishes the job of a tab closed mid-run; the dead run counts", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const a = await openQueuePage(context, baseURL);
  await workerReady(a); // the first tab holds the lease
  const b = await openServerOnlyHarness(context, /** @type {string} */ (baseURL));
  expect(await py(b, ONLY_IMPORT)).toBe("imported");

  const id = await py(a, `
job = queue.enqueue_fetch("POST", "/api/hold/closed-mid-run", {"n": 1}, label="slow")
job.id`);
  await expect.poll(() => holding(request)).toEqual(["closed-mid-run"]);
  expect(await workerHasPyodide(b)).toBe(false); // B waits in line, Pyodide-free
  await a.close(); // mid-run
  await release(request, "closed-mid-run"); // from now on the server answers at once

  await expect.poll(async () => (await storedRecord(b, id))?.status, { intervals: [250] }).toBe("done");
  expect(await storedRecord(b, id)).toMatchObject({ status: "done", attempts: 2 }); // A's dead run spent one
  expect(await workerHasPyodide(b)).toBe(true);
});

test("a waiting tab has no Pyodide in its worker yet stores, queries and deletes at once; it drains when the holder closes", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const a = await openQueuePage(context, baseURL);
  await workerReady(a);
  const b = await openQueuePage(context, baseURL);
  expect(await workerHasPyodide(b)).toBe(false);

  // A runs a job that the server holds; B files one of the same type (it waits behind it).
  const running = await py(a, `
j1 = queue.enqueue_fetch("POST", "/api/hold/first", {"n": 1}, type="save")
j1.id`);
  await expect.poll(() => holding(request)).toEqual(["first"]);
  const filed = await py(b, `
j2 = queue.enqueue_fetch("POST", "/api/echo/second", {"n": 2}, type="save")
await asyncio.wait_for(j2.stored, 10)   # stored by B's own page, its worker still waiting
_recs = {r["id"]: r["status"] for r in await asyncio.wait_for(queue.query_all(), 10)}
json.dumps({"id": j2.id, "statuses": _recs})`);
  expect(filed.statuses).toMatchObject({ [running]: "running", [filed.id]: "pending" });
  expect(await storedRecord(b, filed.id)).toMatchObject({ status: "pending", _params: { path: "/api/echo/second" } });

  // B deletes A's running job: A drops the run, and B's job of that type runs next, on A.
  expect(await py(b, `str(await asyncio.wait_for(queue.delete_job(${JSON.stringify(running)}), 10))`)).toBe("True");
  await expect.poll(() => py(a, `json.dumps([r["end"] is not None for r in runs if r["path"] == "/api/hold/first"])`)).toEqual([true]);
  expect(await py(a, `json.dumps([(await j1.done).status, (await j1.done).code])`)).toEqual(["cancelled", "deleted"]);
  expect(await py(b, `json.dumps((await asyncio.wait_for(j2.done, 30)).status)`)).toBe("done");
  expect(await storedRecord(b, running)).toBeNull();
  expect(await workerHasPyodide(b)).toBe(false); // all of it without a second Pyodide

  // Another long job on A and one more from B behind it; then the holder closes.
  const third = await py(a, `
j3 = queue.enqueue_fetch("POST", "/api/hold/third", {"n": 3}, type="save")
j3.id`);
  await expect.poll(() => holding(request)).toContain("third");
  const fourth = await py(b, `
j4 = queue.enqueue_fetch("POST", "/api/echo/fourth", {"n": 4}, type="save")
await asyncio.wait_for(j4.stored, 10)
j4.id`);
  await a.close();
  await release(request, "third");
  await expect.poll(() => workerHasPyodide(b), { intervals: [250] }).toBe(true); // it took the lease
  expect(await py(b, `json.dumps([(await asyncio.wait_for(queue.job(${JSON.stringify(third)}).done, 60)).status,
                                  (await asyncio.wait_for(j4.done, 60)).status])`)).toEqual(["done", "done"]);
  expect(await storedRecord(b, third)).toMatchObject({ status: "done", attempts: 2 });
  const log = await serverLog(request);
  expect(log.filter((r) => r.path === "/api/echo/second")).toHaveLength(1);
  expect(log.filter((r) => r.path === "/api/echo/fourth")).toHaveLength(1);
});
