// @ts-check
// Every example in the README's "Use it in your page" runs as written, in the setup it names:
// - cdn.html: Pyodide from the CDN (another origin, a stock lock without pyjobq), pyjobq from
//   PyPI through micropip — and a second tab hears the first tab's job finish;
// - pyscript.html / pyscript-worker.html: PyScript from the CDN on its default interpreter
//   (Pyodide 314.0.2 from the CDN), pyjobq through its `packages` config, on the main thread
//   and with the `worker` attribute;
// - pyscript-self-hosted.html: PyScript served by the app, its "interpreter" the app's Pyodide;
// - self-hosted.html: a distribution on the app's own origin whose lock lists pyjobq.
// The CDN and PyPI are answered offline from build/cdn (registries.js). Each page is served at
// /readme/<name> with the README's app.py beside it, byte for byte as the README has them.
const fs = require("fs");
const path = require("path");
const { test, expect } = require("@playwright/test");
const { useRegistries } = require("./registries");
const { readmeExample: example, storedRecord } = require("./helpers");

/**
 * Answer the CDN and PyPI offline (registries.js) and serve the README's examples under /readme/,
 * for every page of `context`; returns the registries' `{ leaks, served }`.
 */
async function readmeSite(context, baseURL) {
  const registries = await useRegistries(context, /** @type {string} */ (baseURL));
  await context.route(`${baseURL}/readme/*`, (route) => {
    const name = new URL(route.request().url()).pathname.split("/").pop() || "";
    const type = name.endsWith(".py") ? "text/x-python; charset=utf-8" : "text/html; charset=utf-8";
    return route.fulfill({ status: 200, contentType: type, body: example(name) });
  });
  return registries;
}

/** Console lines of `page`, as they come (Python's print reaches the console in every host). */
function consoleOf(page, tag) {
  const lines = [];
  page.on("console", (msg) => {
    lines.push(msg.text());
    if (msg.type() === "error") console.log(`[${tag} console error] ${msg.text()}`);
  });
  page.on("pageerror", (err) => console.log(`[${tag} page error] ${err.message}`));
  return lines;
}

/** Wait for the line starting with `prefix` and return its words after the prefix. */
async function printed(lines, prefix, timeout = 90_000) {
  await expect.poll(() => lines.find((l) => l.startsWith(prefix)), { timeout, intervals: [250] }).toBeTruthy();
  return /** @type {string} */ (lines.find((l) => l.startsWith(prefix))).slice(prefix.length).trim().split(/\s+/);
}

/** Run one example page to the end of app.py; returns the saved job's id. */
async function runExample(page, lines, name) {
  await page.goto(`/readme/${name}`);
  const [id, status, path] = await printed(lines, "saved:");
  expect([status, path]).toEqual(["done", "/api/notes"]);
  expect(await printed(lines, "thumbnail:")).toEqual(["{'width':", "64}"]);
  // The task's call, stored under its name with its arguments.
  const record = await storedRecord(page, id, "notes-jobs");
  expect(record).toMatchObject({
    status: "done", type: "notes", label: "save note", _params: { args: ["hello"], kwargs: {} },
  });
  expect(record._reconstructor).toMatch(/:save_note$/);
  return id;
}

/** Open a new tab and run the example `name` in it (`runExample`); the tab, its console lines, the job's id. */
async function runInNewTab(context, name, tag = name) {
  const page = await context.newPage();
  const lines = consoleOf(page, tag);
  const id = await runExample(page, lines, name);
  return { page, lines, id };
}

test.describe("README examples, as written", () => {
  test.describe.configure({ timeout: 180_000 });

  test("cdn.html: Pyodide from the CDN, pyjobq from PyPI; another tab sees the job finish", async ({ context, baseURL }) => {
    const { leaks, served } = await readmeSite(context, baseURL);
    const { lines: linesB } = await runInNewTab(context, "cdn.html", "tab B");
    const { id: idA } = await runInNewTab(context, "cdn.html", "tab A");
    // Tab B's queue hears tab A's job reach done (job-update over the BroadcastChannel).
    await expect.poll(() => linesB.includes(`update: ${idA} done`), { timeout: 30_000 }).toBe(true);

    // The worker loaded Pyodide from the CDN too (a distribution whose lock lacks pyjobq), and
    // pyjobq came from PyPI's Simple API — nothing from the app's own origin but app.py.
    expect(served).toContain("https://cdn.jsdelivr.net/pyodide/v314.0.7/full/pyodide.asm.wasm");
    expect(served).toContain("https://pypi.org/simple/pyjobq/");
    expect(served.some((u) => u.startsWith("https://files.pythonhosted.org/packages/pyjobq/pyjobq-"))).toBe(true);
    const lock = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "build", "cdn", "pyodide", "v314.0.7", "full", "pyodide-lock.json"), "utf8"));
    expect(Object.keys(lock.packages)).not.toContain("pyjobq");
    expect(leaks).toEqual([]);
  });

  for (const name of ["pyscript.html", "pyscript-worker.html"]) {
    test(`${name}: PyScript on its default interpreter, pyjobq from its packages config`, async ({ context, baseURL }) => {
      const { leaks, served } = await readmeSite(context, baseURL);
      const { page } = await runInNewTab(context, name);
      // The app ran where the example says: with `worker`, PyScript's own worker hosts it (and
      // pyjobq's scheduler worker beside it); without, only pyjobq's scheduler is a worker.
      const scheduler = (w) => w.url().includes("#db=notes-jobs");
      const others = page.workers().filter((w) => !scheduler(w));
      console.log(`[${name}] workers: ${page.workers().map((w) => w.url().slice(0, 60)).join(", ")}`);
      expect(page.workers().filter(scheduler).length).toBe(1);
      expect(others.length).toBe(name === "pyscript-worker.html" ? 1 : 0);
      // PyScript's own default: Pyodide 314.0.2 from the CDN, for the page and pyjobq's worker.
      expect(served).toContain("https://cdn.jsdelivr.net/pyodide/v314.0.2/full/pyodide.asm.wasm");
      expect(served).toContain("https://pypi.org/simple/pyjobq/");
      expect(leaks).toEqual([]);
    });
  }

  test("cdn.html with pyjobq from a wheel URL instead of PyPI", async ({ context, baseURL }) => {
    const { leaks, served } = await readmeSite(context, baseURL);
    // The same page, installing the wheel by URL — here one the app serves itself.
    const wheel = fs.readdirSync(path.join(__dirname, "..", "..", "build", "cdn", "pypi", "files"))
      .find((f) => f.startsWith("pyjobq-") && f.endsWith(".whl"));
    await context.route(`${baseURL}/readme/wheels/*`, (route) => route.fulfill({
      status: 200, contentType: "application/octet-stream",
      path: path.join(__dirname, "..", "..", "build", "cdn", "pypi", "files", /** @type {string} */ (wheel)),
    }));
    const page = example("cdn.html").replace('install("pyjobq")', `install(new URL("wheels/${wheel}", location.href).href)`);
    expect(page).toContain(`wheels/${wheel}`);
    await context.route(`${baseURL}/readme/cdn-wheel-url.html`, (route) => route.fulfill({ status: 200, contentType: "text/html", body: page }));
    await runInNewTab(context, "cdn-wheel-url.html", "wheel URL");
    expect(served).toContain("https://cdn.jsdelivr.net/pyodide/v314.0.7/full/pyodide.asm.wasm");
    expect(served.filter((u) => u.startsWith("https://pypi.org/"))).toEqual([]); // not from PyPI
    expect(leaks).toEqual([]);
  });

  test("pyscript-self-hosted.html: PyScript and its interpreter on the app's origin", async ({ context, baseURL }) => {
    const { leaks, served } = await readmeSite(context, baseURL);
    const { page } = await runInNewTab(context, "pyscript-self-hosted.html", "PyScript self-hosted");
    expect(served).toEqual([]); // nothing from a CDN or PyPI
    expect(leaks).toEqual([]);
    // pyjobq's worker loads the page's own Pyodide: the one "interpreter" names.
    const scheduler = page.workers().filter((w) => w.url().includes("#db=notes-jobs"));
    expect(scheduler.length).toBe(1);
    expect(decodeURIComponent(scheduler[0].url())).toContain(`index=${baseURL}/pyodide/`);
  });

  test("self-hosted.html: a distribution on the app's origin whose lock lists pyjobq", async ({ context, baseURL }) => {
    const { leaks, served } = await readmeSite(context, baseURL);
    await runInNewTab(context, "self-hosted.html", "self-hosted");
    expect(served).toEqual([]);
    expect(leaks).toEqual([]);
  });
});
