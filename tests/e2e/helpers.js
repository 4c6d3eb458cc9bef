// @ts-check
// Shared helpers for the multi-tab tests: open a page running pyjobq on its main thread,
// configured with a transport that sends to the test server.
const { expect } = require("@playwright/test");

/**
 * Python that configures the queue with a fetch transport to the test server.
 * Every request the transport sends is recorded in the page's `runs` list as
 * {path, start, end} (Date.now() ms, comparable across pages), `end` null while in flight.
 * `transport: false` configures no transport at all.
 */
function configurePython({ reconstructors = "", extra = "", transport = true } = {}) {
  return `
import json, asyncio, pyjobq
import js
from pyodide.http import pyfetch

runs = []

async def send(method, path, body):
    # Read on every replay: a test may change window.token between tries.
    headers = {"Content-Type": "application/json"}
    token = getattr(js.window, "token", None)
    if token:
        headers["Authorization"] = "Bearer " + str(token)
    kw = {} if body is None else {"body": json.dumps(body)}
    run = {"path": path, "start": js.Date.now(), "end": None}
    runs.append(run)
    try:
        return await pyfetch(path, method=method, headers=headers, **kw)
    finally:
        run["end"] = js.Date.now()

${reconstructors}
pyjobq.configure(${[transport ? "transport=send" : "", extra.replace(/^\s*,\s*/, "")].filter(Boolean).join(", ")})
from pyjobq import queue
updates = []
queue.on_update(lambda u: updates.append(dict(u)))
"ok"
`;
}

/** Block everything but the test server, open the harness and configure the queue. */
async function openQueuePage(context, baseURL, options = {}) {
  await context.route(
    (url) => !url.href.startsWith(baseURL),
    (route) => route.abort("internetdisconnected"),
  );
  const page = await context.newPage();
  page.on("console", (msg) => { if (msg.type() === "error") console.log(`[page error] ${msg.text()}`); });
  await page.goto("/tests/harness.html");
  await page.waitForFunction(() => window.pyReady === true, null, { timeout: 30_000 });
  await py(page, configurePython(options));
  await queueReady(page);
  return page;
}

/** Wait until the page's queue answers (its own store requests: at once, whatever its worker does). */
async function queueReady(page) {
  await py(page, "await asyncio.wait_for(queue.query_all(), 60)\n'ok'");
}

/** Wait until this tab's scheduler worker runs Pyodide: only the tab holding the lease gets there. */
async function workerReady(page, timeoutSeconds = 60) {
  await py(page, `
async def _worker_ready():
    while not queue._queue().worker_ready:
        await asyncio.sleep(0.1)
await asyncio.wait_for(_worker_ready(), ${timeoutSeconds})
'ok'`);
}

/** Run Python on a page; a JSON string result comes back decoded. */
async function py(page, code) {
  return page.evaluate((c) => window.py(c), code);
}

async function resetServer(request) {
  const res = await request.post("/__control/reset");
  expect(res.ok()).toBeTruthy();
}

/** The test server's request log: [{started, time, method, path, status, job_id}]. */
async function serverLog(request) {
  return (await request.get("/__control/log")).json();
}

/** Keys of /api/hold/<key> requests blocked on the server right now (one entry per request). */
async function holding(request) {
  return (await request.get("/__control/holding")).json();
}

/** Let /api/hold/<key> requests go (all keys held now when key is omitted). */
async function release(request, key) {
  const res = await request.post("/__control/release", { data: key === undefined ? {} : { key } });
  expect(res.ok()).toBeTruthy();
}

module.exports = { openQueuePage, queueReady, workerReady, py, configurePython, resetServer, serverLog, holding, release };
