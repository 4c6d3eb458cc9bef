// @ts-check
// Leaks: thousands of jobs leave the live PyProxy count and the event listeners where they
// started, on the page and in its scheduler worker.
//
// Two counts on each side (pyjobq/browser/proxies.py):
//   - pyjobq's registry: every create_proxy and addEventListener of pyjobq's browser package,
//     made through proxies.create / proxies.listen and counted until destroyed / removed;
//   - Pyodide's own allocation tracing (pyodide._module.pyproxy_alloc_map): every PyProxy made
//     since tracing began — pyjobq's, the WebLoop's timers, the borrowed ones of each call —
//     and not destroyed. A proxy left to the garbage collector stays counted.
// The worker's counts come back through a `debug_counts` request on the worker link.
//
// `make test` runs 300 jobs (half persistent, half volatile). LEAKS_FULL=1 runs 10,000.
// Nothing here is timed: the counts are read once the jobs have settled (polled until they
// return, with a generous budget on a loaded machine, then compared).
const { test, expect } = require("@playwright/test");
const { HARNESS, py, queueReady, harnessReady } = require("./helpers");

const FULL = !!process.env.LEAKS_FULL;
const N = FULL ? 10_000 : 300;
test.setTimeout(FULL ? 3_600_000 : 300_000);

const SETUP = `
import asyncio, json, pyjobq

def noop(params):
    async def run(signal):
        return params["i"]
    return run

pyjobq.configure(reconstructors={"noop": noop})
from pyjobq import queue
from pyjobq.browser import proxies
side = queue._queue()

async def volatile_job(signal):
    await asyncio.sleep(0)
    return 1

async def run_jobs(n, start=0, batch=250):
    bad = []
    for first in range(start, start + n, batch):
        jobs = []
        for i in range(first, min(first + batch, start + n)):
            if i % 2:
                jobs.append(queue.enqueue_persistent("noop", {"i": i}, type=f"p{i % 3}", label=f"leak {i}"))
            else:
                jobs.append(queue.enqueue(volatile_job, type=f"v{i % 3}", label=f"leak {i}"))
        outcomes = await asyncio.gather(*[job.done for job in jobs])
        bad += [o.status for o in outcomes if o.status != "done"]
    return bad

async def snapshot(trace=False):
    if trace:
        proxies.trace_pyodide_proxies()
    # Let deferred releases (a transaction destroys its proxies a turn after it ends) run.
    for _ in range(3):
        await asyncio.sleep(0.05)
    worker = await asyncio.wait_for(proxies.worker_counts(side, trace=trace), 60)
    return {"page": proxies.counts(), "worker": worker}
"ok"
`;

test(`${N} jobs leave live proxies and listeners where they started, page and worker`, async ({ page }) => {
  page.on("console", (msg) => { if (msg.type() === "error") console.log(`[page error] ${msg.text()}`); });
  await page.goto(HARNESS);
  await harnessReady(page);
  await py(page, SETUP);
  await queueReady(page);

  // Warm up: the volatile engine, the database connection and the listeners are made once.
  expect(await py(page, "json.dumps(await run_jobs(20, start=-20))")).toEqual([]);
  const before = await py(page, "json.dumps(await snapshot(trace=True))");
  console.log("before", JSON.stringify(before));
  expect(before.page.listeners).toBeGreaterThan(0); // the registry sees pyjobq's listeners
  expect(before.worker.listeners).toBeGreaterThan(0);
  // Pyodide's tracing counts for real: one proxy made and kept shows, destroyed it goes.
  expect(await py(page, `
from pyodide.ffi import create_proxy
_probe = create_proxy(lambda: 0)
json.dumps(proxies.counts()["pyodide_proxies"])`)).toBe(before.page.pyodide_proxies + 1);
  expect(await py(page, "_probe.destroy()\njson.dumps(proxies.counts()['pyodide_proxies'])"))
    .toBe(before.page.pyodide_proxies);

  expect(await py(page, `json.dumps(await run_jobs(${N}))`)).toEqual([]);

  // The jobs have settled; counts may still be coming down (a deferred destroy, a cancelled
  // timer's callback): poll until they return, then compare.
  let after = null;
  for (let i = 0; i < 60; i++) {
    after = await py(page, "json.dumps(await snapshot())");
    if (JSON.stringify(after) === JSON.stringify(before)) break;
    await page.waitForTimeout(1_000);
  }
  console.log("after", JSON.stringify(after));
  expect(after).toEqual(before);
});
