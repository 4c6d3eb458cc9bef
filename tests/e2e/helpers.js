// @ts-check
// Shared helpers for the multi-tab tests: open a page running pyjobq on its main thread,
// configured with a transport that sends to the test server.
const { expect } = require("@playwright/test");

/** Python that configures the queue with a fetch transport to the test server. */
function configurePython({ reconstructors = "", extra = "" } = {}) {
  return `
import json, asyncio, pyjobq
from pyodide.http import pyfetch

async def send(method, path, body):
    # Read on every replay: a test may change window.token between tries.
    import js
    headers = {"Content-Type": "application/json"}
    token = getattr(js.window, "token", None)
    if token:
        headers["Authorization"] = "Bearer " + str(token)
    kw = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers=headers, **kw)

${reconstructors}
pyjobq.configure(transport=send${extra})
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
  return page;
}

/** Run Python on a page; a JSON string result comes back decoded. */
async function py(page, code) {
  return page.evaluate((c) => window.py(c), code);
}

async function resetServer(request) {
  const res = await request.post("/__control/reset");
  expect(res.ok()).toBeTruthy();
}

module.exports = { openQueuePage, py, configurePython, resetServer };
