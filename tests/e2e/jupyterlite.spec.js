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
// Every request that leaves the test server is aborted and remembered.
const fs = require("fs");
const path = require("path");
const { test, expect } = require("@playwright/test");
const { useRegistries } = require("./registries");

const ROOT = path.join(__dirname, "..", "..");
const LITE = path.join(path.resolve(ROOT, process.env.E2E_SITE || path.join("build", "site")), "lite");
const README = fs.readFileSync(path.join(ROOT, "README.md"), "utf8");

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

/** The record for `id` in the origin's IndexedDB database `dbName`, read from `page`. */
async function storedRecord(page, dbName, id) {
  return page.evaluate(async ([name, jobId]) => {
    const db = await new Promise((resolve, reject) => {
      const r = indexedDB.open(name);
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    try {
      return await new Promise((resolve, reject) => {
        const q = db.transaction("jobs").objectStore("jobs").get(jobId);
        q.onsuccess = () => resolve(q.result ?? null);
        q.onerror = () => reject(q.error);
      });
    } finally {
      db.close();
    }
  }, [dbName, id]);
}

/** The fenced block right after `<!-- example: NAME -->` in the README (as readme.spec.js reads it). */
function example(name) {
  const after = README.split(`<!-- example: ${name} -->`)[1];
  const match = after && after.match(/^\s*```[a-z]*\n([\s\S]*?)```/);
  if (!match) throw new Error(`README.md has no example ${name}`);
  return match[1];
}

/** The README's JupyterLite example as cells: `# %% next cell: app.py as above` stands for app.py. */
function readmeCells() {
  return example("jupyterlite").split(/^# %% next cell(.*)\n/m).reduce((cells, part, i) => {
    if (i % 2 === 0) {
      if (part.trim()) cells[cells.length - 1] += part;
    } else if (/^: app\.py as above\s*$/.test(part)) {
      cells.push(example("app.py"));
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
  expect(await storedRecord(notebook, "ui-jobs", id)).toMatchObject({
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
  expect(cells.length).toBe(3);
  const { notebook } = await newNotebook(context);

  const install = await runCell(notebook, 0, cells[0], KERNEL_BOOT_MS);
  await expect(install).not.toContainText("Error");
  const app = await runCell(notebook, 1, cells[1]);
  await expect(app).toContainText(/saved: [0-9a-f]{32} done 200/);
  await expect(app).toContainText("thumbnail: {'width': 64}");
  const id = /saved: ([0-9a-f]{32})/.exec(await app.innerText())?.[1];

  const table = (await runCell(notebook, 2, cells[2])).locator('[data-mime-type="text/html"] table.pyjobq-jobs');
  await expect(table).toContainText(/** @type {string} */ (id));
  expect(await storedRecord(notebook, "notes-jobs", id)).toMatchObject({
    status: "done", _params: { method: "POST", path: "/api/notes", body: { text: "hello" } },
  });

  // pyjobq came from PyPI's Simple API; the kernel's Pyodide from the site, not the CDN.
  expect(served).toContain("https://pypi.org/simple/pyjobq/");
  expect(served.some((u) => u.startsWith("https://files.pythonhosted.org/packages/pyjobq/pyjobq-"))).toBe(true);
  expect(served.filter((u) => u.startsWith("https://cdn.jsdelivr.net/"))).toEqual([]);
  expect(leaks).toEqual([]);
});
