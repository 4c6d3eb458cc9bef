// @ts-check
// A plain page's preload line (docs/guide.md "Start the worker with the page"): pyjobq's worker
// is started before the page's own loadPyodide, loads its Pyodide and the distribution's pyjobq
// beside the page's, and is adopted by the page's queue when it starts:
// - the first job runs on that worker, which imported the distribution's pyjobq itself (the
//   page sends no files: the RECORD digests match);
// - a second tab's preloaded worker starts no Pyodide while another tab holds the lease, and
//   boots when the lease comes to it;
// - a preload line of another distribution, or one whose path does not exist, costs the page
//   nothing but the wait: it starts a worker of its own, and the console says why;
// - a preload line whose index= is a CDN (another origin, a stock lock without pyjobq, pyjobq
//   installed on the page from PyPI): the page adopts the worker and sends it its files.
const { test, expect: baseExpect } = require("@playwright/test");
const { configurePython, py, resetServer, serverLog, harnessReady } = require("./helpers");
const { useRegistries } = require("./registries");

const expect = baseExpect.configure({ timeout: 60_000 });

/** The preload harness with the test server as its only host; `worker` overrides the line's URL. */
async function openPreloaded(context, baseURL, worker) {
  await context.route((url) => !url.href.startsWith(baseURL), (route) => route.abort("internetdisconnected"));
  const page = await context.newPage();
  const console = [];
  page.on("console", (msg) => console.push(msg.text()));
  await page.goto(worker ? `/tests/preload.html?worker=${encodeURIComponent(worker)}` : "/tests/preload.html");
  await harnessReady(page);
  await py(page, configurePython());
  return { page, console };
}

/** Enqueue a POST to `path` and wait for its outcome's status. */
async function runJob(page, path) {
  return py(page, `
_job = queue.enqueue_fetch("POST", ${JSON.stringify(path)}, {"n": 1})
(await asyncio.wait_for(_job.done, 60)).status.value`);
}

/** The pyjobq scheduler workers of `page`, by the URL they were started with. */
function pyjobqWorkers(page) {
  return page.workers().filter((w) => /#(db=|preload)/.test(w.url()));
}

test.beforeEach(async ({ request }) => resetServer(request));

test("a preloaded worker runs the first job on the pyjobq it installed itself, and the page starts no worker of its own", async ({ context, baseURL, request }) => {
  const { page } = await openPreloaded(context, baseURL);
  expect(await runJob(page, "/api/echo/preload-1")).toBe("done");
  const workers = pyjobqWorkers(page);
  expect(workers.map((w) => w.url())).toEqual([expect.stringContaining("#preload&index=/pyodide/")]);
  // The distribution's wheel, installed by the worker, not the page's files unpacked at boot.
  const where = await workers[0].evaluate(() => self.pyodide.runPython("import pyjobq; pyjobq.__file__"));
  expect(where).toContain("site-packages/pyjobq/");
  expect((await serverLog(request)).filter((r) => r.path === "/api/echo/preload-1")).toHaveLength(1);
});

test("a second tab's preloaded worker starts no Pyodide while the first holds the lease, and boots when it gets it", async ({ context, baseURL, request }) => {
  const first = await openPreloaded(context, baseURL);
  expect(await runJob(first.page, "/api/echo/preload-a")).toBe("done");
  const second = await openPreloaded(context, baseURL);
  await py(second.page, `
async def _in_line():
    while queue._queue().lease_holder is None:
        await asyncio.sleep(0.1)
await asyncio.wait_for(_in_line(), 60)
"ok"`);
  const [waiting] = pyjobqWorkers(second.page);
  expect(await waiting.evaluate(() => typeof self.pyodide)).toBe("undefined");
  await first.page.close();
  expect(await runJob(second.page, "/api/echo/preload-b")).toBe("done");
  expect(await waiting.evaluate(() => typeof self.pyodide)).toBe("object");
  const log = await serverLog(request);
  expect(log.filter((r) => r.path === "/api/echo/preload-b")).toHaveLength(1);
});

test("a preload line naming another distribution: the page starts its own worker, runs the job, and says why", async ({ context, baseURL }) => {
  const { page, console } = await openPreloaded(context, baseURL, "/pyjobq-worker.mjs#preload&index=/elsewhere/pyodide/");
  expect(await runJob(page, "/api/echo/preload-other")).toBe("done");
  expect(console.some((t) => t.includes("make the preload line's index= the page's"))).toBe(true);
  expect(pyjobqWorkers(page).some((w) => w.url().includes("#db="))).toBe(true);
});

test("a preload line whose path does not exist: the page starts its own worker after a short wait and says why", async ({ context, baseURL }) => {
  const { page, console } = await openPreloaded(context, baseURL, "/no-such-worker.mjs#preload&index=/pyodide/");
  expect(await runJob(page, "/api/echo/preload-missing")).toBe("done");
  expect(console.some((t) => t.includes("did not answer") && t.includes("check the path in the preload line"))).toBe(true);
});

test("a preload line whose index is a CDN: the page installs pyjobq from PyPI, adopts the worker and sends it its files", async ({ context, baseURL, request }) => {
  const { leaks } = await useRegistries(context, /** @type {string} */ (baseURL));
  const cdn = "https://cdn.jsdelivr.net/pyodide/v314.0.7/full/";
  await context.route(`${baseURL}/preload-cdn.html`, (route) => route.fulfill({
    status: 200, contentType: "text/html; charset=utf-8", body: `<!doctype html>
<meta charset="utf-8">
<script type="module">globalThis.pyjobqWorker = new Worker("/pyjobq-worker.mjs#preload&index=${cdn}", { type: "module" });</script>
<script type="module">
  const { loadPyodide } = await import("${cdn}pyodide.mjs");
  const pyodide = await loadPyodide();
  await pyodide.loadPackage("micropip");
  await pyodide.pyimport("micropip").install("pyjobq");
  window.pyodide = pyodide;
  window.pyReady = true;
</script>` }));
  const page = await context.newPage();
  const lines = [];
  page.on("console", (msg) => lines.push(msg.text()));
  await page.goto("/preload-cdn.html");
  await harnessReady(page);
  await py(page, configurePython());
  expect(await runJob(page, "/api/echo/preload-cdn")).toBe("done");
  // One scheduler worker: the preloaded one, adopted (no worker of the page's own, no complaint).
  expect(pyjobqWorkers(page).map((w) => w.url())).toEqual([`${baseURL}/pyjobq-worker.mjs#preload&index=${cdn}`]);
  expect(lines.filter((t) => t.includes("preload line"))).toEqual([]);
  // The CDN's lock lists no pyjobq: the worker runs the files the page sent, not a wheel of its own.
  const where = await pyjobqWorkers(page)[0].evaluate(() => self.pyodide.runPython("import pyjobq; pyjobq.__file__"));
  expect(where).not.toContain("site-packages/pyjobq/");
  expect((await serverLog(request)).filter((r) => r.path === "/api/echo/preload-cdn")).toHaveLength(1);
  expect(leaks).toEqual([]);
});
