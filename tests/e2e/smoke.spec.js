// @ts-check
// Smoke test of the offline Pyodide distribution in build/site: the page can load Pyodide
// and pyjobq with no network, and so can a module worker started from a Blob URL, which is
// how pyjobq starts its scheduler worker (DESIGN.md, "Pyodide facts").
const { test, expect } = require("@playwright/test");

// Fail on any request that leaves the test server: the site must be self-contained.
test.beforeEach(async ({ context, baseURL }) => {
  await context.route(
    (url) => !url.href.startsWith(/** @type {string} */ (baseURL)),
    (route) => route.abort("internetdisconnected"),
  );
});

test("page loads pyodide, micropip and pyjobq offline", async ({ page }) => {
  await page.goto("/tests/blank.html");
  const result = await page.evaluate(async () => {
    const t0 = performance.now();
    const { loadPyodide } = await import("/pyodide/pyodide.mjs");
    const py = await loadPyodide();
    const loadMs = performance.now() - t0;
    await py.loadPackage(["pyjobq", "micropip"]);
    const out = py.runPython(`
import sys, pyjobq, micropip
(sys.platform, pyjobq.__name__, list(pyjobq.__path__)[0])
`).toJs();
    return { loadMs, platform: out[0], name: out[1], path: out[2] };
  });
  console.log(`page: loadPyodide ${result.loadMs.toFixed(0)} ms`);
  expect(result.platform).toBe("emscripten");
  expect(result.name).toBe("pyjobq");
  expect(result.path).toContain("site-packages/pyjobq"); // the wheel, not a stray copy
});

test("blob-URL module worker with #hash loads pyodide and pyjobq", async ({ page, baseURL }) => {
  await page.goto("/tests/blank.html");
  const result = await page.evaluate(async (origin) => {
    const src = `
      self.onmessage = null;
      try {
        const t0 = performance.now();
        const indexURL = ${JSON.stringify(origin + "/pyodide/")};
        const { loadPyodide } = await import(indexURL + "pyodide.mjs");
        const py = await loadPyodide({ indexURL });
        const loadMs = performance.now() - t0;
        await py.loadPackage(["pyjobq"]);
        const name = py.runPython("import pyjobq; pyjobq.__name__");
        self.postMessage({ ok: true, loadMs, name, hash: self.location.hash });
      } catch (e) {
        self.postMessage({ ok: false, error: String(e && e.stack || e) });
      }
    `;
    const url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
    const worker = new Worker(url + "#db=pyjobq-smoke", { type: "module" });
    try {
      return await new Promise((resolve, reject) => {
        worker.onmessage = (ev) => resolve(ev.data);
        worker.onerror = (ev) => reject(new Error(`worker error: ${ev.message}`));
      });
    } finally {
      worker.terminate();
      URL.revokeObjectURL(url);
    }
  }, baseURL);
  expect(result.ok, result.error).toBe(true);
  console.log(`worker: loadPyodide ${result.loadMs.toFixed(0)} ms`);
  expect(result.name).toBe("pyjobq");
  expect(result.hash).toBe("#db=pyjobq-smoke");
});
