// @ts-check
// pyjobq's Playwright helper: cross-tab tests of a page that runs pyjobq under Pyodide.
//
// Ships inside the pyjobq wheel, beside the CPython kit (pyjobq/testing/); find it with
//   python -c "import pyjobq.testing as t; print(t.PLAYWRIGHT_HELPER)"
// and require() or import it from your Playwright tests (CommonJS: both work).
//
// Every helper runs Python on the page through one runner: `window.py(code)` when the page
// defines it (pyjobq's own test harness does), else `window.pyodide.runPythonAsync(code)`.
// Pass `{ run: async (page, code) => ... }` to use your own. Code runs with top-level await;
// a JSON string result comes back decoded. Nothing here mocks the browser: tabs are real
// pages of one context (one origin), crashes are renderer crashes, freezes are Chromium's.
"use strict";

let runs = 0;

/**
 * Run Python on the page (see the header for which runner); a JSON string result is decoded.
 * With `timeout` (ms), bounded from Playwright's side: a timer in the page could not fire while
 * synchronous Python holds its main thread, and page.evaluate has no timeout. So the run is
 * started on a task of its own, its outcome kept in the page, and awaited with
 * page.waitForFunction, which the driver bounds. Without it, the test's own timeout (Playwright
 * Test's) is the bound. A custom `run` bounds its own wait.
 */
async function py(page, code, { run, timeout } = {}) {
  if (run) return decoded(await run(page, code));
  if (timeout === undefined) {
    // Unbounded here: Playwright Test's own per-test timeout ends the test.
    return decoded(await page.evaluate(async (c) => {
      const w = /** @type {any} */ (window);
      if (typeof w.py === "function") return w.py(c);
      if (w.pyodide) return String(await w.pyodide.runPythonAsync(c));
      throw new Error("pyjobq-playwright: the page defines neither window.py nor window.pyodide");
    }, code));
  }
  if (!(timeout > 0)) throw new Error(`py: timeout must be a number of ms greater than 0, not ${timeout} (0 would mean no timeout at all)`);
  const n = `${process.pid}-${++runs}`;
  const end = Date.now() + timeout;
  const first = code.trim().split("\n")[0];
  const inPage = async (fn, arg, ms, options = {}) => {
    try {
      const handle = await page.waitForFunction(fn, arg, { timeout: Math.max(ms, 1), ...options });
      try { return await handle.jsonValue(); } finally { await handle.dispose(); }
    } catch (e) {
      if (!(e instanceof Error) || e.name !== "TimeoutError") throw e;
      throw new Error(`Python (code starting ${JSON.stringify(first)}) on ${page.url()} did not finish within ` +
        `${timeout} ms: the page's main thread is busy (synchronous Python or JavaScript holding it, e.g. ` +
        "time.sleep or a loop with no await), or the code never finished. Raise timeout if it is only slow, " +
        "or look for blocking code; a page whose thread stays busy answers nothing, so close it rather than reuse it");
    }
  };
  await inPage(([c, id]) => {
    const w = /** @type {any} */ (window);
    const all = w.__pyjobq || (w.__pyjobq = {});
    if (id in all) return true;
    const entry = all[id] = { settled: false };
    const settle = (fields) => { Object.assign(entry, fields, { settled: true }); };
    let go;
    if (typeof w.py === "function") go = () => w.py(c);
    else if (w.pyodide) go = async () => String(await w.pyodide.runPythonAsync(c));
    else {
      settle({ error: "pyjobq-playwright: the page defines neither window.py nor window.pyodide" });
      return true;
    }
    setTimeout(() => {
      Promise.resolve().then(go).then(
        (value) => settle({ value: value === undefined ? null : value }),
        (e) => settle({ error: String((e && e.stack) || (e && e.message) || e) }));
    }, 0);
    return true;
  }, [code, n], timeout);
  const outcome = await inPage((id) => {
    const all = /** @type {any} */ (window).__pyjobq || {};
    const entry = all[id];
    // Synchronous on purpose: waitForFunction takes a returned promise as a true value at once,
    // so an async check would hand back `false` for any run longer than its first look.
    if (!entry || !entry.settled) return false;
    delete all[id];
    return "error" in entry ? { error: entry.error } : { value: entry.value };
  }, n, end - Date.now(), { polling: 20 });
  if ("error" in outcome) throw new Error(`Python on ${page.url()} failed (code starting ${JSON.stringify(first)}):\n${outcome.error}`);
  return decoded(outcome.value);
}

function decoded(value) {
  if (typeof value !== "string") return value;
  try { return JSON.parse(value); } catch { return value; }
}

/**
 * Wait until the page's queue answers: its own store requests work (IndexedDB open, the page
 * side started). A tab waiting in line for the processor lease is ready too: it stores and
 * answers at once, whatever its worker does.
 */
async function queueReady(page, { timeout = 120_000, run } = {}) {
  const seconds = Math.max(1, Math.round(timeout / 1000));
  await py(page, `import asyncio, pyjobq\nawait asyncio.wait_for(pyjobq.query_all(), ${seconds})\n"ok"`, { run });
}

/**
 * Open a tab of `url` in `context` and wait until its queue is ready.
 *
 * Options: `ready` — a function run in the page that is true once Python can run (default:
 * `window.pyReady === true || !!window.pyodide`); `setup` — Python to run first (configure
 * the queue, define reconstructors); `before(page)` — runs before navigating (routes, init
 * scripts); `timeout` — for each wait, ms (default 120 s: two Pyodides boot per tab);
 * `run` — the Python runner; `logErrors` — print the page's console errors (default true).
 */
async function openTab(context, url, { ready, setup, before, timeout = 120_000, run, logErrors = true } = {}) {
  const page = await context.newPage();
  if (logErrors) {
    page.on("console", (msg) => {
      if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) console.log(`[page error] ${msg.text()}`);
    });
  }
  if (before) await before(page);
  await page.goto(url);
  await waitForPython(page, { ready, timeout });
  if (setup) await py(page, setup, { run });
  await queueReady(page, { timeout, run });
  return page;
}

/** Wait until Python can run on the page (after a navigation or a reload). */
async function waitForPython(page, { ready, timeout = 120_000 } = {}) {
  const predicate = ready || (() => {
    const w = /** @type {any} */ (window);
    return w.pyReady === true || !!w.pyodide;
  });
  await page.waitForFunction(predicate, null, { timeout });
}

/** Every job this tab's queue lists (`pyjobq.query_all()`: its rows, volatile jobs included). */
async function jobs(page, { run } = {}) {
  return py(page, "import json, pyjobq\njson.dumps(await pyjobq.query_all())", { run });
}

/** One job's row as this tab lists it, or null. */
async function jobRow(page, id, { run } = {}) {
  const rows = await jobs(page, { run });
  return rows.find((r) => r.id === id) ?? null;
}

/**
 * Wait until the job `id` has one of `statuses` (a string or a list) in this tab's list;
 * returns its row. Polls every `interval` ms; throws naming the last status seen on timeout.
 */
async function waitForStatus(page, id, statuses, { timeout = 60_000, interval = 100, run } = {}) {
  const wanted = Array.isArray(statuses) ? statuses : [statuses];
  const end = Date.now() + timeout;
  let row = null;
  for (;;) {
    row = await jobRow(page, id, { run });
    if (row && wanted.includes(row.status)) return row;
    if (Date.now() > end) {
      throw new Error(`job ${id} did not reach ${wanted.join(" or ")} in ${timeout} ms (last: ${row ? row.status : "not listed"})`);
    }
    await page.waitForTimeout(interval);
  }
}

/**
 * Crash the tab's renderer (CDP `Page.crash`, as an out-of-memory kill would): no `pagehide`,
 * no `unload`, its workers die with it and its Web Locks are released. Resolves once it crashed.
 */
/** Throw naming the engine when `context` is not Chromium's: `what` speaks Chromium's DevTools protocol. */
function needsChromium(context, what) {
  const browser = context.browser();
  const engine = browser ? browser.browserType().name() : "chromium";
  if (engine !== "chromium") {
    throw new Error(`${what} needs Chromium's DevTools protocol, and this tab runs in ${engine}: run this test ` +
      `in a Chromium project only, or close the page (page.close()) — the nearest thing ${engine} offers to ` +
      'a crash (docs/testing.md, "Firefox and WebKit")');
  }
}

async function crashTab(context, page, { timeout = 10_000 } = {}) {
  needsChromium(context, "crashTab");
  const cdp = await context.newCDPSession(page);
  const crashed = page.waitForEvent("crash", { timeout });
  cdp.send("Page.crash").catch(() => {}); // never answers: the renderer is gone
  await crashed;
}

// Said on the console by the page's own `freeze` handler: the only word a frozen page can give.
const FROZE = "pyjobq-testing:freeze";

/**
 * Freeze the tab as Chromium freezes a background tab (CDP `Page.setWebLifecycleState`):
 * `freeze` fires, then no task of the page or its workers runs. It keeps its Web Locks. Returns
 * `resume()`, which fires `resume` and lets it run again. Needs a browser from
 * `launchChromium()` (its `context`): pages of a browser Playwright launched itself, or of a
 * context it created, cannot be frozen (its focus emulation keeps them visible and the freeze
 * is silently ignored), so this throws, naming it,
 * when no `freeze` fires within `timeout` ms (the tab is left running).
 */
async function freezeTab(context, page, { timeout = 10_000 } = {}) {
  needsChromium(context, "freezeTab");
  await page.evaluate((froze) => {
    const w = /** @type {any} */ (window);
    if (w.__pyjobqWatchesFreeze) return;
    w.__pyjobqWatchesFreeze = true;
    document.addEventListener("freeze", () => console.debug(froze));
  }, FROZE);
  const cdp = await context.newCDPSession(page);
  const froze = page.waitForEvent("console", { predicate: (m) => m.text() === FROZE, timeout });
  await cdp.send("Page.setWebLifecycleState", { state: "frozen" });
  try {
    await froze;
  } catch {
    await cdp.send("Page.setWebLifecycleState", { state: "active" });
    throw new Error(`the tab did not freeze: Chromium fired no \`freeze\` event within ${timeout} ms. ` +
      "Pages of a browser Playwright launched itself, or of a context it created, cannot be frozen (its " +
      "focus emulation keeps them visible, and Page.setWebLifecycleState is then silently ignored); open " +
      "the tab in the context launchChromium() gives, which starts Chromium and connects to it so that " +
      "its pages can be frozen");
  }
  return async () => {
    await cdp.send("Page.setWebLifecycleState", { state: "active" });
  };
}

/** Take every tab of `context` offline: requests fail as without a network, `navigator.onLine` is false. */
async function offline(context) {
  await context.setOffline(true);
}

/** Bring every tab of `context` back online; tabs get `online` (pyjobq runs the jobs that waited). */
async function online(context) {
  await context.setOffline(false);
}

/**
 * Start Chromium with a fresh profile and connect to it over CDP: its own `context`, whose
 * pages `freezeTab` can freeze (Playwright keeps the pages of a browser it launches, and of a
 * context it creates, visible; the default context of a browser it connects to with
 * `noDefaults` has no such setting). Options: `chromium` (from `@playwright/test` or
 * `playwright`), `executablePath` (default: Playwright's own Chromium), `args`, `headless`,
 * `timeout` (ms, for Chromium to give its DevTools address). Returns
 * `{ browser, context, close }`; `close()` stops Chromium and removes its temporary profile.
 */
async function launchChromium({ chromium, executablePath, args = [], headless = true, timeout = 30_000 }) {
  const { spawn } = require("child_process");
  const fs = require("fs");
  const os = require("os");
  const path = require("path");
  const exe = executablePath || chromium.executablePath();
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "pyjobq-chromium-"));
  const proc = spawn(exe, ["--remote-debugging-port=0", `--user-data-dir=${profile}`, "--no-first-run",
    "--no-default-browser-check", "--no-sandbox", ...(headless ? ["--headless"] : []), ...args, "about:blank"],
  { stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise((resolve) => { proc.once("exit", resolve); proc.once("error", resolve); });
  const close = async () => {
    proc.kill();
    await exited;
    try {
      fs.rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
    } catch { /* Chromium's helpers may still write it for a moment: never fail a test over it */ }
  };
  try {
    const endpoint = await new Promise((resolve, reject) => {
      let seen = "";
      const timer = setTimeout(() => reject(new Error(`Chromium at ${exe} gave no DevTools address in ${timeout} ms; it said:\n${seen}`)), timeout);
      proc.stderr.on("data", (chunk) => {
        seen += chunk;
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(seen);
        if (m) { clearTimeout(timer); resolve(m[1]); }
      });
      proc.once("error", (e) => { clearTimeout(timer); reject(new Error(`could not start Chromium at ${exe}: ${e.message}`)); });
      proc.once("exit", (code) => { clearTimeout(timer); reject(new Error(`Chromium at ${exe} exited (${code}):\n${seen}`)); });
    });
    const browser = await chromium.connectOverCDP(endpoint, { noDefaults: true, timeout });
    return { browser, context: browser.contexts()[0], close: async () => { await browser.close().catch(() => {}); await close(); } };
  } catch (e) {
    await close();
    throw e;
  }
}

module.exports = {
  py, queueReady, openTab, waitForPython, jobs, jobRow, waitForStatus, crashTab, freezeTab, offline, online, launchChromium,
};
