// @ts-check
// playwright.cjs (the JavaScript kit) against real pages: each helper does what docs/testing.md's
// table says — the behaviours tests/test_playwright_kit.py checks for the Python kit, test for
// test. The crash mid-run is each kit's docs example (testing_docs.spec.js here).
// Two pages are loaded the way users load them: Pyodide from the CDN with pyjobq from PyPI by
// micropip, and a PyScript page (PyScript and its default Pyodide from the CDN, pyjobq from its
// `packages`); the CDN and PyPI are answered offline from build/cdn (registries.js). The app's API is answered by routes,
// except where a request must cross the (emulated) network: a routed answer never does, so an
// offline try goes to the test server's /api/echo.
const { test, expect, chromium } = require("@playwright/test");
const { useRegistries, PYSCRIPT_VERSION } = require("./registries");
const kit = require("../../pyjobq/testing/playwright.cjs");

const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const FLAGS = require("../chromium-flags.json");
const PYODIDE_VERSION = "314.0.7";

// The README's cdn.html, plus the one line a page adds so the kit can run Python on it.
const CDN_PAGE = `<!doctype html>
<meta charset="utf-8">
<script type="module">
  import { loadPyodide } from "https://cdn.jsdelivr.net/pyodide/v${PYODIDE_VERSION}/full/pyodide.mjs";
  const pyodide = await loadPyodide();
  await pyodide.loadPackage("micropip");
  await pyodide.pyimport("micropip").install("pyjobq");
  window.pyodide = pyodide;  // what the kit runs Python through
</script>
`;

// The README's pyscript.html, its Python exposing Pyodide to the kit (docs/testing.md).
const PYSCRIPT_PAGE = `<!doctype html>
<meta charset="utf-8">
<script type="module" src="https://cdn.jsdelivr.net/npm/@pyscript/core@${PYSCRIPT_VERSION}/dist/core.js"></script>
<script type="py" config='{"packages": ["pyjobq"]}'>
import js, pyodide_js
js.window.pyodide = pyodide_js
</script>
`;

const SETUP = `
import json, pyjobq
from pyodide.http import pyfetch

async def send(method, path, body):
    return await pyfetch(path, method=method, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})

pyjobq.configure(transport=send)
`;

/** Python that files a persistent POST of `body` to `path` and gives its id. */
function save(path, body) {
  return `job = pyjobq.enqueue_fetch('POST', ${JSON.stringify(path)}, ${JSON.stringify(body)})\nawait job.stored\njson.dumps(job.id)`;
}

/** The app's API, as the browser sees it: every request recorded, answered 201. */
function api(sent) {
  return (route) => {
    sent.push(route.request().postDataJSON());
    return route.fulfill({ status: 201, json: { saved: true } });
  };
}

/** The job's record straight from the origin's IndexedDB (no pyjobq call), or null. */
async function storedRecord(page, id) {
  return page.evaluate(async (jobId) => {
    const db = await new Promise((ok, no) => {
      const r = indexedDB.open("ui-jobs");
      r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error);
    });
    try {
      return await new Promise((ok, no) => {
        const q = db.transaction("jobs").objectStore("jobs").get(jobId);
        q.onsuccess = () => ok(q.result ?? null); q.onerror = () => no(q.error);
      });
    } finally { db.close(); }
  }, id);
}

/** The CDN and PyPI answered from build/cdn, the app's API routed (its requests in `sent`), and
 * `page` (HTML) served at /kit/<name>.html: opened with SETUP run on it. */
async function openKitPage(context, baseURL, name, page) {
  const { served } = await useRegistries(context, baseURL);
  const sent = [];
  await context.route("**/api/notes/**", api(sent));
  await context.route(`${baseURL}/kit/${name}.html`, (route) => route.fulfill({ contentType: "text/html", body: page }));
  const tab = await kit.openTab(context, `/kit/${name}.html`, { setup: SETUP });
  return { tab, served, sent };
}

test("a CDN page runs Python, lists its records and waits out an offline spell", async ({ context, baseURL }) => {
  test.setTimeout(180_000);
  const { tab, served, sent } = await openKitPage(context, /** @type {string} */ (baseURL), "cdn", CDN_PAGE);
  expect(served).toContain(`https://cdn.jsdelivr.net/pyodide/v${PYODIDE_VERSION}/full/pyodide.asm.wasm`);
  expect(served.some((u) => u.startsWith("https://files.pythonhosted.org/packages/pyjobq/"))).toBe(true);

  // py: top-level await, a JSON string decoded, a Python error named.
  expect(await kit.py(tab, "import asyncio\nawait asyncio.sleep(0)\njson.dumps({'n': [1, 2]})")).toEqual({ n: [1, 2] });
  expect(await kit.py(tab, "'plain text'")).toBe("plain text");
  await expect(kit.py(tab, "1 / 0")).rejects.toThrow(/ZeroDivisionError/);
  // What docs/testing.md tells a page without a JavaScript line of its own to expose.
  expect(await kit.py(tab, "import pyodide_js\njson.dumps(callable(pyodide_js.runPythonAsync))")).toBe(true);

  // jobs / jobRow / waitForStatus: the records, as stored in the origin's IndexedDB.
  const first = await kit.py(tab, save("/api/notes/first", { text: "hello" }));
  const row = await kit.waitForStatus(tab, first, "done");
  expect(row._params).toEqual({ method: "POST", path: "/api/notes/first", body: { text: "hello" } });
  expect(row.http_status).toBe(201);
  expect(sent).toEqual([{ text: "hello" }]);
  // (IndexedDB keeps Python's None as undefined where the row, through JSON, says null.)
  expect(await storedRecord(tab, first)).toMatchObject({ id: first, status: "done", http_status: 201, attempts: row.attempts, _params: row._params });
  expect((await kit.jobs(tab)).map((j) => j.id)).toEqual([first]);
  expect(await kit.jobRow(tab, "no-such-job")).toBeNull();
  await expect(kit.waitForStatus(tab, "no-such-job", ["done"], { timeout: 300 })).rejects.toThrow(/no-such-job did not reach done .*\(last: not listed\)/);

  // offline / online: a try while offline costs no attempt; back online, the job is done.
  await kit.offline(context);
  expect(await tab.evaluate(() => navigator.onLine)).toBe(false);
  const path = `/api/echo/kit-offline-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  const second = await kit.py(tab, save(path, { text: "offline" }));
  await expect.poll(async () => (await kit.jobRow(tab, second))?.code, { timeout: 60_000, intervals: [100] }).toBe("offline");
  expect(await kit.jobRow(tab, second)).toMatchObject({ status: "pending", attempts: 0 });
  await kit.online(context);
  const done = await kit.waitForStatus(tab, second, "done");
  expect(done).toMatchObject({ http_status: 200, attempts: 1, result: { path, body: { text: "offline" } } });
});

test("a PyScript page runs a job the kit reads", async ({ context, baseURL }) => {
  test.setTimeout(180_000);
  const { tab, served, sent } = await openKitPage(context, /** @type {string} */ (baseURL), "pyscript", PYSCRIPT_PAGE);
  expect(served.some((u) => u.startsWith("https://cdn.jsdelivr.net/pyodide/"))).toBe(true);
  const id = await kit.py(tab, save("/api/notes/pyscript", { host: "pyscript" }));
  expect((await kit.waitForStatus(tab, id, "done")).http_status).toBe(201);
  expect((await kit.jobs(tab)).map((j) => j.id)).toEqual([id]);
  expect(sent).toEqual([{ host: "pyscript" }]);
});

test("freezeTab refuses a page it cannot freeze and leaves it running", async ({ context }) => {
  const page = await context.newPage();
  await page.goto("/tests/blank.html");
  await expect(kit.freezeTab(context, page, { timeout: 2_000 })).rejects.toThrow(/did not freeze[\s\S]*launchChromium/);
  expect(await page.evaluate(() => new Promise((ok) => setTimeout(() => ok("running"), 10)))).toBe("running");
});

test("a frozen tab hands over and runs again on resume", async ({ baseURL }) => {
  test.setTimeout(180_000);
  const { context, close } = await kit.launchChromium({ chromium, executablePath: CHROMIUM, args: FLAGS });
  try {
    const sent = [];
    await context.route("**/api/notes/**", api(sent));
    const first = await kit.openTab(context, `${baseURL}/tests/harness.html`, { setup: SETUP });
    const second = await kit.openTab(context, `${baseURL}/tests/harness.html`, { setup: SETUP });
    const before = await kit.py(first, save("/api/notes/before", { n: 1 }));
    await kit.waitForStatus(first, before, "done");

    const resume = await kit.freezeTab(context, first);
    // The frozen tab let its lease go: the other one takes over and runs a new job.
    const during = await kit.py(second, save("/api/notes/during", { n: 2 }));
    expect((await kit.waitForStatus(second, during, "done")).http_status).toBe(201);

    await resume();
    expect(await kit.py(first, "json.dumps(1 + 1)")).toBe(2);
    expect((await kit.waitForStatus(first, during, "done")).id).toBe(during);
    expect(sent).toEqual([{ n: 1 }, { n: 2 }]);
  } finally {
    await close();
  }
});

test("Python that holds the main thread is bounded by the driver", async ({ context }) => {
  // A page timer cannot end a wait while synchronous Python holds the thread (the Python kit's
  // test_python_that_holds_the_main_thread_is_bounded_by_the_driver, its twin).
  const tab = await kit.openTab(context, "/tests/harness.html", { setup: SETUP });
  const start = Date.now();
  await expect(kit.py(tab, "import time\ntime.sleep(3)\n'slept'", { timeout: 1_000 }))
    .rejects.toThrow(/within 1000 ms: the page's main thread is busy/);
  expect(Date.now() - start).toBeLessThan(2_500);
  await tab.waitForTimeout(3_000);
  expect(await kit.py(tab, "json.dumps(6 * 7)", { timeout: 10_000 })).toBe(42);
  expect(await kit.py(tab, "import asyncio\nawait asyncio.sleep(0.1)\n'later'", { timeout: 10_000 })).toBe("later");
  // A run longer than one look of the bounded wait gives its own value, not the look's "not yet".
  expect(await kit.py(tab, "import asyncio\nawait asyncio.sleep(2.5)\n'much later'", { timeout: 10_000 })).toBe("much later");
  await expect(kit.py(tab, "1 / 0", { timeout: 10_000 })).rejects.toThrow(/ZeroDivisionError/);
  expect(await kit.py(tab, "json.dumps(1 + 1)")).toBe(2); // without a timeout: as before
  await expect(kit.py(tab, "1", { timeout: 0 })).rejects.toThrow(/timeout must be .* greater than 0/);
});
