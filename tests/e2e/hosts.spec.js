// @ts-check
// The same queue, unchanged, in each place Python runs in a browser (docs/guide.md, "Hosts"):
// - a PyScript page (<script type="py"> on the main thread, PyScript served from /pyscript/,
//   Pyodide from /pyodide/ — no CDN);
// - the executor side inside a dedicated module worker with no window and no DOM (the shape of
//   JupyterLite's Pyodide kernel), its scheduler a nested worker;
// - a plain page with Pyodide on its main thread: persistent.spec.js.
// Each test uses its own /api/echo/hosts-*-<key> path: the shared test server's log may be
// reset by other runs, so nothing here reads it.
const { test, expect } = require("@playwright/test");
const { storedRecord } = require("./helpers");

/** Abort every request that leaves the test server, and remember it so the test can fail on it. */
async function offline(context, baseURL) {
  const leaks = [];
  await context.route(
    (url) => !url.href.startsWith(/** @type {string} */ (baseURL)) && !url.protocol.startsWith("blob") && !url.protocol.startsWith("data"),
    (route) => { leaks.push(route.request().url()); return route.abort("internetdisconnected"); },
  );
  return leaks;
}

function uniqueKey() {
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/**
 * Open `/tests/<name>.html?key=<a new key>` offline (see `offline`), its console errors printed;
 * `before(page)` runs before it navigates. Returns the page, its key and the requests that leaked.
 */
async function openHost(context, baseURL, name, before = () => {}) {
  const leaks = await offline(context, baseURL);
  const key = uniqueKey();
  const page = await context.newPage();
  page.on("console", (msg) => { if (msg.type() === "error") console.log(`[${name} console error] ${msg.text()}`); });
  page.on("pageerror", (err) => console.log(`[${name} page error] ${err.message}`));
  before(page);
  await page.goto(`/tests/${name}.html?key=${key}`);
  return { page, key, leaks };
}

test("a PyScript page imports the queue and completes a persistent job, offline", async ({ context, baseURL }) => {
  test.setTimeout(120_000);
  const { page, key, leaks } = await openHost(context, baseURL, "pyscript");

  const outcomeText = page.locator("#outcome");
  await expect(outcomeText).not.toBeEmpty({ timeout: 90_000 });
  const outcome = JSON.parse(await outcomeText.innerText());
  expect(outcome.error).toBeUndefined();
  expect(outcome.status).toBe("done");
  expect(outcome.http_status).toBe(200);
  expect(outcome.result).toMatchObject({ method: "POST", path: `/api/echo/hosts-pyscript-${key}`, body: { host: "pyscript" } });

  const record = await storedRecord(page, outcome.id);
  expect(record).toMatchObject({ status: "done", _params: { method: "POST", path: `/api/echo/hosts-pyscript-${key}` } });

  // PyScript and Pyodide came from this site: the local distribution, no CDN.
  const loaded = await page.evaluate(() => performance.getEntriesByType("resource").map((e) => e.name));
  expect(loaded.some((u) => u.includes("/pyscript/core.js"))).toBe(true);
  expect(loaded.some((u) => u.includes("/pyodide/pyodide.asm.wasm"))).toBe(true);
  expect(leaks).toEqual([]);
});

test("the executor side runs in a worker with no window or DOM (a JupyterLite-style kernel)", async ({ context, baseURL }) => {
  test.setTimeout(120_000);
  const { page, key, leaks } = await openHost(context, baseURL, "worker-host", (p) => {
    p.on("worker", (w) => console.log(`[worker-host] worker started: ${w.url().slice(0, 80)}`));
  });

  await page.waitForFunction(() => window.kernelOutcome !== undefined, null, { timeout: 90_000 });
  const { messages, outcome } = await page.evaluate(() => ({ messages: window.kernelMessages, outcome: window.kernelOutcome }));
  expect(outcome.message).toBeUndefined();

  // Inside the kernel worker: a worker scope that can start workers, with no window and no document.
  const globals = messages.find((m) => m.type === "globals");
  expect(globals).toEqual({ type: "globals", window: "undefined", document: "undefined", worker: "function", isWorkerScope: true });
  expect(outcome.python_sees).toEqual({ window: false, document: false });

  expect(outcome.type).toBe("outcome");
  expect(outcome.status).toBe("done");
  expect(outcome.http_status).toBe(200);
  expect(outcome.result).toMatchObject({ method: "POST", path: `/api/echo/hosts-kernel-${key}`, body: { host: "worker" } });
  expect(outcome.repr_html_has_job).toBe(true);

  // The scheduler (nested in the kernel worker) stored the record in the origin's IndexedDB,
  // which the page shares.
  const record = await storedRecord(page, outcome.id);
  expect(record).toMatchObject({ status: "done", _params: { method: "POST", path: `/api/echo/hosts-kernel-${key}`, body: { host: "worker" } } });
  expect(leaks).toEqual([]);
});
