// @ts-check
// A real JupyterLite, offline (docs/hosts-jupyterlite.md): the site `jupyter lite build` makes
// from jupyterlite-core and jupyterlite-pyodide-kernel 0.8.6 (scripts/build_jupyterlite.py),
// served at /lite/ by the test server, same origin as the fake API. Driven through Jupyter
// Notebook's own UI, as a user does it: the file browser's New -> "Python (Pyodide)" opens a
// notebook in a new tab, the Select Kernel dialog, cells typed and run with Shift+Enter.
// The kernel is a Web Worker; pyjobq's scheduler is a module worker nested in it.
//
// - The first test is the site as scripts/build_jupyterlite.py builds it: the kernel's Pyodide
//   is the site's own (a stock 314.0.6 whose lock does not list pyjobq) and `%pip install
//   pyjobq` finds the wheel the site ships in its piplite index.
// - The second runs the README's JupyterLite example as written, on a site that does not ship
//   pyjobq: `%pip install pyjobq` falls back to PyPI, answered offline by registries.js.
// - The third is a notebook's session as a user has it: the `queue` table redraws
//   itself in place as its jobs run, lists every stored job after a kernel restart, and the
//   configure cell can be run again — with other names it says to restart the kernel.
// Every request that leaves the test server is aborted and remembered.
const fs = require("fs");
const path = require("path");
const { test, expect } = require("@playwright/test");
const { useRegistries } = require("./registries");
const { readmeExample: example, storedRecord, release, serverLog } = require("./helpers");

const ROOT = path.join(__dirname, "..", "..");
const LITE = path.join(path.resolve(ROOT, process.env.E2E_SITE || path.join("build", "site")), "lite");

// Two Pyodides boot per notebook (the kernel's, then the scheduler worker's) on a 2-core
// machine: patient, and no timing is asserted.
const KERNEL_BOOT_MS = 180_000;
const CELL_MS = 120_000;

test.beforeAll(() => {
  if (!fs.existsSync(path.join(LITE, "jupyter-lite.json"))) {
    throw new Error(`${LITE} is missing: run \`make build\` (scripts/build_jupyterlite.py)`);
  }
});

function uniqueKey() {
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

// JupyterLab's own chatter on every start, and the 404 lines of the missing favicons (below).
const LITE_NOISE = [
  /^Skipping \{command: /, /^Menu entry for command '[^']+' is duplicated/, /^Uploader widget not found/,
  /^Failed to load resource: the server responded with a status of 404/,
];

/**
 * Echo the warnings and errors on the console of `page` (its workers' messages come through
 * too) and keep every line. Failed loads are logged with their URL instead, except the
 * notebook favicons: jupyter lite build copies those from jupyter_server, which this build
 * does not install (docs/hosts-jupyterlite.md).
 */
function consoleOf(page, tag) {
  const lines = [];
  page.on("console", (msg) => {
    lines.push(`${msg.type()}: ${msg.text()}`);
    if ((msg.type() === "error" || msg.type() === "warning") && !LITE_NOISE.some((re) => re.test(msg.text()))) {
      console.log(`[${tag} ${msg.type()}] ${msg.text().slice(0, 500)}`);
    }
  });
  page.on("response", (response) => {
    if (response.status() >= 400 && !/\/(favicon\.ico|static\/favicons\/[^/]+\.ico)$/.test(new URL(response.url()).pathname)) {
      console.log(`[${tag}] HTTP ${response.status()} ${response.url()}`);
    }
  });
  page.on("pageerror", (err) => console.log(`[${tag} page error] ${err.message}`));
  return lines;
}

/**
 * Open the file browser and create a notebook the way a user does: New -> "Python (Pyodide)"
 * opens it in a new tab, whose Select Kernel dialog offers the Pyodide kernel.
 */
async function newNotebook(context) {
  const tree = await context.newPage();
  consoleOf(tree, "lite tree");
  await tree.goto("/lite/tree/");
  await tree.locator('[data-jp-item-name="new-dropdown"]').getByRole("menuitem", { name: "New" }).click();
  const [notebook] = await Promise.all([
    context.waitForEvent("page"),
    tree.locator('.lm-Menu-item[data-command="notebook:create-new"]').getByText("Python (Pyodide)").click(),
  ]);
  const lines = consoleOf(notebook, "lite notebook");
  const dialog = notebook.getByRole("dialog").filter({ hasText: "Select Kernel" });
  await expect(dialog).toContainText("Python (Pyodide)", { timeout: 60_000 });
  await dialog.getByRole("button", { name: "Select" }).click({ timeout: 30_000 });
  await expect(notebook.locator(".jp-Notebook .jp-Cell")).toHaveCount(1);
  return { notebook, lines };
}

/**
 * Type `source` into the notebook's cell `index` (the empty one Shift+Enter left below the
 * last), run it with Shift+Enter, wait for its execution count, and return its output area.
 * insertText enters the text as one input, as a paste does, so the editor's auto-indent and
 * bracket closing do not rewrite it.
 */
async function runCell(notebook, index, source, timeout = CELL_MS) {
  const cell = notebook.locator(".jp-Notebook .jp-Cell").nth(index);
  await cell.locator(".cm-content").click();
  await notebook.keyboard.insertText(source);
  await notebook.keyboard.press("Shift+Enter");
  await expect(cell.locator(".jp-InputPrompt")).toHaveText(/\[\d+\]/, { timeout });
  return cell.locator(".jp-OutputArea");
}

/** The execution count a cell's prompt shows, or null while it runs or never ran. */
async function promptCount(cell) {
  const m = /\[(\d+)\]/.exec(await cell.locator(".jp-InputPrompt").innerText());
  return m ? Number(m[1]) : null;
}

/**
 * Run notebook cell `index` again as it stands (click into it, Shift+Enter) and wait until its
 * prompt shows `count`, the kernel's next execution count.
 */
async function rerunCell(notebook, index, count, timeout = CELL_MS) {
  const cell = notebook.locator(".jp-Notebook .jp-Cell").nth(index);
  await cell.locator(".cm-content").click({ timeout: 30_000 });
  await notebook.keyboard.press("Shift+Enter");
  await expect(cell.locator(".jp-InputPrompt")).toHaveText(new RegExp(`\\[${count}\\]`), { timeout });
  return cell.locator(".jp-OutputArea");
}

/** Kernel -> Restart Kernel… -> Restart, as a user does it; outputs stay on the page. */
async function restartKernel(notebook) {
  await notebook.locator(".lm-MenuBar-item").filter({ hasText: /^Kernel$/ }).click({ timeout: 30_000 });
  await notebook.locator('.lm-Menu-item[data-command="kernelmenu:restart"]').click({ timeout: 30_000 });
  const dialog = notebook.getByRole("dialog").filter({ hasText: "Restart Kernel?" });
  // The accept button reads "Restart" (its accessible name is "Confirm Kernel Restart").
  const accept = dialog.locator("button.jp-mod-accept");
  await expect(accept).toHaveText("Restart");
  await accept.click({ timeout: 30_000 });
  await expect(dialog).toHaveCount(0);
}

/**
 * The README's JupyterLite example as cells: `# %% next cell: app.py as above` stands for
 * app.py, `# %% next cell: app.py up to step N` for app.py before its line `# N.`.
 */
function readmeCells() {
  return example("jupyterlite").split(/^# %% next cell(.*)\n/m).reduce((cells, part, i) => {
    const upTo = /^: app\.py up to step (\d+)\s*$/.exec(part);
    if (i % 2 === 0) {
      if (part.trim()) cells[cells.length - 1] += part;
    } else if (/^: app\.py as above\s*$/.test(part)) {
      cells.push(example("app.py"));
    } else if (upTo) {
      const app = example("app.py");
      const at = app.search(new RegExp(`^# ${upTo[1]}\\. `, "m"));
      if (at < 0) throw new Error(`README's app.py has no step "# ${upTo[1]}."`);
      cells.push(app.slice(0, at));
    } else if (part.trim() === "") {
      cells.push("");
    } else {
      throw new Error(`README's jupyterlite example: unknown cell marker "# %% next cell${part}"`);
    }
    return cells;
  }, [""]).map((c) => c.trim());
}

test("a notebook installs pyjobq with %pip, completes a persistent job, and `queue` shows it", async ({ context, baseURL }) => {
  test.setTimeout(KERNEL_BOOT_MS + 4 * CELL_MS);
  const leaks = [];
  await context.route(
    (url) => !url.href.startsWith(/** @type {string} */ (baseURL)) && !/^(blob|data):/.test(url.protocol),
    (route) => { leaks.push(route.request().url()); return route.abort("internetdisconnected"); },
  );
  const requested = [];
  context.on("request", (request) => requested.push(request.url()));
  const key = uniqueKey();
  const apiPath = `/api/echo/lite-${key}`;
  const { notebook, lines } = await newNotebook(context);

  // The first cell waits for the kernel: its Pyodide, micropip, piplite, then ipykernel,
  // pyodide-kernel, comm, ipython and jedi — all from the site, none from an index.
  const install = await runCell(notebook, 0, "%pip install pyjobq", KERNEL_BOOT_MS);
  await expect(install).not.toContainText("Error");

  // Where this code runs: the kernel's dedicated worker, no window, no document.
  const scope = await runCell(notebook, 1, [
    "import js",
    'print(js.self.constructor.name, hasattr(js, "window"), hasattr(js, "document"), js.location.origin)',
  ].join("\n"));
  await expect(scope).toHaveText(`DedicatedWorkerGlobalScope False False ${baseURL}`);

  const enqueue = await runCell(notebook, 2, `import json
import pyjobq
from pyodide.http import pyfetch

async def send(method, path, body):
    kw = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"}, **kw)

pyjobq.configure(transport=send)
from pyjobq import queue
job = queue.enqueue_fetch("POST", "${apiPath}", {"host": "jupyterlite"})
print("job id:", job.id)`);
  await expect(enqueue).toHaveText(/^\s*job id: [0-9a-f]{32}\s*$/);
  const id = (await enqueue.innerText()).trim().split(" ").pop();

  // The scheduler worker boots its own Pyodide (the kernel's distribution) before it runs the job.
  const done = await runCell(notebook, 3, `out = await job.done
print(out.status, out.http_status)
print(json.dumps(out.result, sort_keys=True))`);
  await expect(done).toContainText("done 200");
  const echoed = JSON.parse((await done.innerText()).trim().split("\n").pop() || "null");
  expect(echoed).toMatchObject({ method: "POST", path: apiPath, body: { host: "jupyterlite" } });

  // A cell ending in `queue` renders its _repr_html_ table, with this job in it.
  const table = (await runCell(notebook, 4, "queue")).locator('[data-mime-type="text/html"] table.pyjobq-jobs');
  await expect(table).toBeVisible();
  await expect(table).toContainText(id);
  await expect(table.locator("tbody tr").filter({ hasText: id })).toContainText("done");

  // The record is in the origin's IndexedDB under the default name, which the page shares.
  expect(await storedRecord(notebook, id, "ui-jobs")).toMatchObject({
    id, status: "done", _params: { method: "POST", path: apiPath, body: { host: "jupyterlite" } },
  });

  // The scheduler is a worker of this page, nested in the kernel's worker, on the default names.
  const workers = notebook.workers().map((w) => w.url());
  expect(workers.some((u) => /\/pyodide-kernel-extension\/static\/comlink\.worker\.[0-9a-f]+\.js$/.test(u))).toBe(true);
  expect(workers.some((u) => u.startsWith("blob:") && u.includes("#db=ui-jobs"))).toBe(true);
  // The kernel's Pyodide and pyjobq's wheel came from this site, and the lock it loaded from
  // does not list pyjobq (a user's does not either).
  expect(requested).toContain(`${baseURL}/lite/static/pyodide/pyodide.asm.wasm`);
  expect(requested.some((u) => /\/lite\/pypi\/pyjobq-[^/]+-py3-none-any\.whl/.test(u))).toBe(true);
  const lock = JSON.parse(fs.readFileSync(path.join(LITE, "static", "pyodide", "pyodide-lock.json"), "utf8"));
  expect(Object.keys(lock.packages)).not.toContain("pyjobq");

  // Nothing left the test server. A canary from the kernel proves the block sees the kernel
  // worker's requests, although JupyterLite's service worker re-fetches its GETs.
  expect(leaks).toEqual([]);
  const canary = `https://cdn.jsdelivr.net/pyjobq-canary/${key}`;
  const probe = await runCell(notebook, 5, `try:
    await pyfetch("${canary}")
    print("reached")
except Exception as e:
    print("blocked:", type(e).__name__)`);
  await expect(probe).toHaveText("blocked: AbortError");
  expect(leaks).toEqual([canary]);
  expect(lines.filter((l) => /worker_error|WorkerUnavailable/.test(l))).toEqual([]);
});

test("the README's JupyterLite example runs as written, pyjobq from PyPI", async ({ context, baseURL }) => {
  test.setTimeout(KERNEL_BOOT_MS + 3 * CELL_MS);
  const { leaks, served } = await useRegistries(context, /** @type {string} */ (baseURL));
  // A site that does not ship pyjobq's wheel (most do not): its piplite index is empty, so
  // `%pip install pyjobq` asks PyPI, as on jupyterlite.github.io.
  await context.route(`${baseURL}/lite/pypi/all.json*`, (route) => route.fulfill({ status: 200, contentType: "application/json", body: "{}" }));
  const cells = readmeCells();
  expect(cells.length).toBe(4);
  const { notebook } = await newNotebook(context);

  const install = await runCell(notebook, 0, cells[0], KERNEL_BOOT_MS);
  await expect(install).not.toContainText("Error");
  await expect(await runCell(notebook, 1, cells[1])).not.toContainText("Error");
  // The table, shown before the job: the store answers (no jobs), then it follows the job.
  const table = (await runCell(notebook, 2, cells[2])).locator('[data-mime-type="text/html"] table.pyjobq-jobs');
  await expect(table).toContainText("No jobs yet.");
  const app = await runCell(notebook, 3, cells[3]);
  await expect(app).toContainText(/saved: [0-9a-f]{32} done \/api\/notes/);
  const id = /** @type {string} */ (/saved: ([0-9a-f]{32})/.exec(await app.innerText())?.[1]);
  await expect(table.locator("tbody tr").filter({ hasText: id })).toContainText("done");
  await expect(table.locator("tbody tr").filter({ hasText: id })).toContainText("save note");
  expect(await storedRecord(notebook, id, "notes-jobs")).toMatchObject({
    status: "done", _reconstructor: "__main__:save_note", _params: { args: ["hello"], kwargs: {} },
  });
  // The README's task sent the job's id as its idempotency key.
  const sent = (await serverLog(notebook.request)).filter((/** @type {any} */ e) => e.path === "/api/notes");
  expect(sent.map((/** @type {any} */ e) => e.idempotency_key)).toContain(id);

  // pyjobq came from PyPI's Simple API; the kernel's Pyodide from the site, not the CDN.
  expect(served).toContain("https://pypi.org/simple/pyjobq/");
  expect(served.some((u) => u.startsWith("https://files.pythonhosted.org/packages/pyjobq/pyjobq-"))).toBe(true);
  expect(served.filter((u) => u.startsWith("https://cdn.jsdelivr.net/"))).toEqual([]);
  expect(leaks).toEqual([]);
});

test("the `queue` table is live, whole after a kernel restart, and the configure cell runs twice", async ({ context, baseURL, request }) => {
  test.setTimeout(2 * KERNEL_BOOT_MS + 10 * CELL_MS);
  const key = uniqueKey();
  const db = `notebook-${key}`;
  const { notebook, lines } = await newNotebook(context);
  const cells = notebook.locator(".jp-Notebook .jp-Cell");
  const jobsTable = (index) => cells.nth(index).locator('[data-mime-type="text/html"] table.pyjobq-jobs');

  await expect(await runCell(notebook, 0, "%pip install pyjobq", KERNEL_BOOT_MS)).not.toContainText("Error");
  // The configure cell, with a transport that sends the idempotency key pyjobq offers.
  const configure = await runCell(notebook, 1, `import json
import pyjobq
from pyodide.http import pyfetch

async def send(method, path, body, *, idempotency_key=None):
    headers = {"Content-Type": "application/json", "Idempotency-Key": idempotency_key or ""}
    kw = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers=headers, **kw)

pyjobq.configure(db_name="${db}", lock_name="${db}", channel_name="${db}", transport=send)
from pyjobq import queue
print("configured", queue.settings.db_name)`);
  await expect(configure).toHaveText(`configured ${db}`);

  // The table, displayed before any job: it fills in from the store, then follows the jobs.
  await runCell(notebook, 2, "queue");
  const tableCount = await promptCount(cells.nth(2));
  await expect(jobsTable(2)).toContainText("No jobs yet.");
  const filed = await runCell(notebook, 3, `slow = queue.enqueue_fetch("POST", "/api/hold/${key}", {"n": 1}, label="slow save")
refused = queue.enqueue_fetch("POST", "/api/status/403", type="other", label="refused save")
print(slow.id, refused.id)`);
  const [slowId, refusedId] = (await filed.innerText()).trim().split(/\s+/);
  const slowRow = jobsTable(2).locator("tbody tr").filter({ hasText: slowId });
  const refusedRow = jobsTable(2).locator("tbody tr").filter({ hasText: refusedId });
  // The scheduler worker boots its Pyodide, then the slow job runs: the server holds it.
  await expect(slowRow).toContainText("running", { timeout: CELL_MS });
  await expect(refusedRow).toContainText("failed", { timeout: CELL_MS });
  // One wording for the failure: the message, which already says its HTTP status and code.
  await expect(refusedRow).toContainText("POST /api/status/403 answered 403 (status_403)");
  await expect(refusedRow).not.toContainText("[status_403]");
  await expect(refusedRow).not.toContainText("HTTP 403");
  await release(request, key);
  await expect(slowRow).toContainText("done", { timeout: CELL_MS });
  // The same output, redrawn: the cell did not run again, and it holds one table.
  expect(await promptCount(cells.nth(2))).toBe(tableCount);
  await expect(jobsTable(2)).toHaveCount(1);
  await expect(jobsTable(2).locator("caption")).toContainText("1 done, 1 failed");

  // A kernel restart: the new kernel has heard of no job, yet its table lists the stored ones.
  await restartKernel(notebook);
  await rerunCell(notebook, 0, 1, KERNEL_BOOT_MS);
  await expect(await rerunCell(notebook, 1, 2)).toHaveText(`configured ${db}`);
  await runCell(notebook, 4, "queue");
  const after = jobsTable(4);
  await expect(after.locator("tbody tr").filter({ hasText: slowId })).toContainText("done");
  await expect(after.locator("tbody tr").filter({ hasText: refusedId })).toContainText("failed");
  await expect(after.locator("caption")).toContainText("1 done, 1 failed");
  await expect(after.locator("caption")).not.toContainText("reading");

  // The configure cell run again in the same kernel: nothing changes, no error, and the
  // next job completes through the transport it gave.
  const again = await rerunCell(notebook, 1, 4);
  await expect(again).toHaveText(`configured ${db}`);
  const second = await runCell(notebook, 5, `second = queue.enqueue_fetch("POST", "/api/echo/second-${key}", label="second save")
out = await second.done
print("second:", out.status, out.http_status, out.result["path"])`);
  await expect(second).toHaveText(`second: done 200 /api/echo/second-${key}`);
  await expect(after.locator("tbody tr").filter({ hasText: "second save" })).toContainText("done");

  // Other names still raise, with advice that fits a notebook.
  const other = await runCell(notebook, 6, 'pyjobq.configure(db_name="other-jobs")');
  await expect(other).toContainText("ConfigurationError");
  await expect(other).toContainText("restart the kernel");
  await expect(other).toContainText(`db_name='${db}'`);
  expect(lines.filter((l) => /worker_error|WorkerUnavailable/.test(l))).toEqual([]);
});
