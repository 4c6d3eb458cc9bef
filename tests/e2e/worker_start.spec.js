// @ts-check
// A scheduler worker that cannot start never leaves a caller waiting: every pending and later
// persistent call raises pyjobq.WorkerUnavailable carrying the worker's own message and what to
// do, the console shows it (no Python logging configured), and volatile jobs keep working.
// Cases: Pyodide missing where the worker looks (the worker's import fails), a worker script
// that throws as it starts, and a Content-Security-Policy that refuses blob: workers — which
// configure(worker_url=...) then gets past.
const { test, expect } = require("@playwright/test");
const { py, harnessReady } = require("./helpers");

/** Open `pagePath` (a harness), collect its console errors, wait for its Pyodide. */
async function openHarness(context, baseURL, pagePath = "/tests/harness.html") {
  await context.route((url) => !url.href.startsWith(baseURL), (route) => route.abort("internetdisconnected"));
  const page = await context.newPage();
  const errors = [];
  page.on("console", (msg) => { if (msg.type() === "error") errors.push(msg.text()); });
  await page.goto(pagePath);
  await harnessReady(page);
  return { page, errors };
}

/** Configure with `options` (Python keyword text), then exercise every persistent call. */
function probe(options) {
  return `
import asyncio, json, time
import pyjobq
pyjobq.configure(${options})
from pyjobq import queue

async def outcome_of(awaitable):
    # The bound only turns the hang this test looks for into a failure; nothing here waits it out.
    try:
        value = await asyncio.wait_for(awaitable, 20)
        return {"value": repr(value), "status": getattr(value, "status", None), "code": getattr(value, "code", None)}
    except pyjobq.WorkerUnavailable as exc:
        return {"raised": type(exc).__name__, "code": exc.code, "stage": exc.stage, "message": str(exc)}
    except BaseException as exc:
        return {"other": f"{type(exc).__name__}: {exc}"}

t0 = time.monotonic()
pending_query = asyncio.ensure_future(queue.query_all())   # sent before the worker fails
job = queue.enqueue_fetch("POST", "/api/echo/worker-start", {"n": 1})
results = {
    "query_all (pending)": await outcome_of(pending_query),
    "stored": await outcome_of(job.stored),
    "done": await outcome_of(job.done),
}
later = queue.enqueue_fetch("POST", "/api/echo/worker-start", {"n": 2})
results.update({
    "stored (later)": await outcome_of(later.stored),
    "query_all (later)": await outcome_of(queue.query_all()),
    "job(id).done": await outcome_of(queue.job("some-stored-id").done),
    "delete_job": await outcome_of(queue.delete_job(job.id)),
    "delete_group": await outcome_of(queue.delete_group("g")),
    "retry_all": await outcome_of(queue.retry_all()),
})
elapsed = time.monotonic() - t0

async def thumbnail(signal):
    return {"width": 64}

volatile = await asyncio.wait_for(queue.enqueue(thumbnail).done, 20)
json.dumps({"results": results, "elapsed": elapsed, "volatile": [volatile.status, volatile.result]})
`;
}

/** Every call failed with WorkerUnavailable at `stage`, its message naming `said`. */
function expectAllFailed(report, stage, said) {
  const { results } = report;
  console.log(`[${stage}] every call answered within ${report.elapsed.toFixed(2)} s: ${results.stored.message}`);
  for (const [call, outcome] of Object.entries(results)) {
    if (call === "done") {
      // Never stored: done resolves failed, saying why.
      expect(outcome, call).toMatchObject({ status: "failed", code: "worker_not_started" });
      expect(outcome.value, call).toContain(said);
      continue;
    }
    expect(outcome, call).toMatchObject({ raised: "WorkerUnavailable", code: "worker_not_started", stage });
    expect(outcome.message, call).toContain(said);
    expect(outcome.message, call).toContain("persistent jobs cannot run on this page");
  }
  expect(report.volatile).toEqual(["done", { width: 64 }]);
}

test("Pyodide missing where the worker looks: every persistent call raises the worker's import error", async ({ context, baseURL }) => {
  const { page, errors } = await openHarness(context, /** @type {string} */ (baseURL));
  const report = await py(page, probe(`pyodide_url="/nowhere/"`));
  expectAllFailed(report, "import", "/nowhere/pyodide.mjs");
  expect(report.results.stored.message).toContain("pyodide_url");
  // The same message on the console, though the page configured no Python logging.
  expect(errors.some((e) => e.includes("pyjobq's scheduler worker did not start (import)") && e.includes("/nowhere/pyodide.mjs"))).toBe(true);
});

test("a worker script that throws as it starts: every persistent call raises its error", async ({ context, baseURL }) => {
  const { page, errors } = await openHarness(context, /** @type {string} */ (baseURL));
  const report = await py(page, probe(`worker_url="/tests/throwing-worker.mjs"`));
  expectAllFailed(report, "script", "this worker script is broken on purpose");
  expect(errors.some((e) => e.includes("did not start (script)") && e.includes("broken on purpose"))).toBe(true);
});

test("pyjobq cannot be loaded in the worker: later persistent calls raise the install error", async ({ context, baseURL }) => {
  // This failure comes after the tab got the lease, once its worker loads Pyodide: the page's
  // own scheduler has already stored the job filed first, so its done raises (this page can
  // no longer learn the outcome) and every call from then on raises.
  const { page, errors } = await openHarness(context, /** @type {string} */ (baseURL));
  const report = await py(page, `
import asyncio, json, pyjobq
pyjobq.configure(worker_packages=["no-such-package"])
from pyjobq import queue
early = queue.enqueue_fetch("POST", "/api/echo/install-fails", {"n": 1})
await asyncio.wait_for(early.stored, 20)

async def _failed():
    while queue._queue().unavailable is None:
        await asyncio.sleep(0.05)
await asyncio.wait_for(_failed(), 60)

async def raised(awaitable):
    try:
        await asyncio.wait_for(awaitable, 20)
        return "answered"
    except pyjobq.WorkerUnavailable as exc:
        return [exc.code, exc.stage, str(exc)]

json.dumps({"early done": await raised(early.done), "query_all": await raised(queue.query_all()),
            "stored": await raised(queue.enqueue_fetch("POST", "/api/echo/install-fails", {"n": 2}).stored),
            "delete_job": await raised(queue.delete_job(early.id)), "retry_all": await raised(queue.retry_all())})
`);
  for (const [call, outcome] of Object.entries(report)) {
    expect(outcome.slice(0, 2), call).toEqual(["worker_not_started", "install"]);
    expect(outcome[2], call).toContain("no-such-package");
    expect(outcome[2], call).toContain("worker_packages");
  }
  expect(errors.some((e) => e.includes("did not start (install)"))).toBe(true);
});

test("worker_packages installs a self-hosted wheel in the worker", async ({ context, baseURL }) => {
  const { page } = await openHarness(context, /** @type {string} */ (baseURL));
  const wheel = await page.evaluate(async () => (await (await fetch("/build-info.json")).json()).pyjobq_wheel);
  const outcome = await py(page, `
import asyncio, json, pyjobq
from pyodide.http import pyfetch

async def send(method, path, body):
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"}, body=json.dumps(body))

pyjobq.configure(worker_packages=["/pyodide/${wheel}"], transport=send)
from pyjobq import queue
out = await asyncio.wait_for(queue.enqueue_fetch("POST", "/api/echo/self-hosted-wheel", {"ok": True}).done, 60)
json.dumps([out.status, out.http_status])
`);
  expect(outcome).toEqual(["done", 200]);
  // The worker installed that wheel (loadPackage), not the page's bundle.
  const worker = page.workers().find((w) => w.url().includes("#db="));
  expect(await worker.evaluate(() => self.pyodide.runPython("import pyjobq, sys; pyjobq.__file__"))).not.toContain("/lib/pyjobq-worker/");
});

test("a CSP without blob: workers fails fast and says what to do; worker_url gets past it", async ({ context, baseURL }) => {
  const { page, errors } = await openHarness(context, /** @type {string} */ (baseURL), "/tests/csp.html");
  const report = await py(page, probe(""));
  expectAllFailed(report, "script", "Content Security Policy");
  expect(report.results.stored.message).toContain("worker_url");
  expect(errors.some((e) => e.includes("did not start (script)"))).toBe(true);

  // The same page, reloaded, with the served copy of the worker script: jobs run.
  await page.reload();
  await harnessReady(page);
  const outcome = await py(page, `
import asyncio, json, pyjobq
from pyodide.http import pyfetch

async def send(method, path, body):
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"}, body=json.dumps(body))

pyjobq.configure(worker_url="/pyjobq-worker.mjs", transport=send)
from pyjobq import queue
out = await asyncio.wait_for(queue.enqueue_fetch("POST", "/api/echo/csp", {"ok": True}).done, 60)
json.dumps([out.status, out.http_status])
`);
  expect(outcome).toEqual(["done", 200]);
});
