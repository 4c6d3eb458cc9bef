// The three engines behind one small interface, so each conformance case is written once:
//   const engine = await launch("firefox");
//   const tab = await engine.open("/tests/harness.html");  // waits for window.pyReady
//   await tab.py("1 + 1");  await tab.reload();  await tab.kill();  await engine.quit();
// Chromium and Firefox are driven by puppeteer-core (CDP and WebDriver BiDi), WebKit by a
// classic WebDriver client (webdriverio) talking to WebKitGTK's WebKitWebDriver, whose
// MiniBrowser runs under Xvfb. Every browser is the machine's own (Debian packages): nothing
// is downloaded.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import puppeteer from "puppeteer-core";
import { remote } from "webdriverio";

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..", "..");
const CHROMIUM_ARGS = JSON.parse(readFileSync(path.join(ROOT, "tests", "chromium-flags.json"), "utf8"));

/** Where each engine lives on a Debian machine (`make setup` installs them). */
export const BINARIES = {
  chromium: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
  firefox: process.env.FIREFOX_PATH || "/usr/bin/firefox-esr",
  webkit: process.env.WEBKIT_DRIVER_PATH || "/usr/bin/WebKitWebDriver",
};
/** How each engine's page processes are named on their command line. */
const FIREFOX_CONTENT = "-isForBrowser";
const WEBKIT_CONTENT = "WebKitWebProcess";
const MINIBROWSER = process.env.MINIBROWSER_PATH || "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser";

/** Wait for `ms`. */
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Run `fn` until it returns a truthy value or `timeoutMs` passes; its last error names why. */
export async function until(fn, timeoutMs = 30_000, what = "a condition") {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (e) { last = e; }
    await sleep(200);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${last.message}` : ""}`);
}

const PY_IN_PAGE = `async (code) => {
  const value = await window.py(code);
  return JSON.stringify(value === undefined ? null : value);
}`;

/** One tab: an engine-neutral handle. */
class Tab {
  constructor(impl) { this.impl = impl; }
  /** Run Python on the page (top-level await allowed); a JSON string result comes back decoded. */
  async py(code) {
    const out = await this.impl.evaluate(PY_IN_PAGE, code);
    return JSON.parse(out);
  }
  /** Run a JavaScript function (given as source) on the page with one JSON argument. */
  evaluate(fnSource, arg = null) { return this.impl.evaluate(fnSource, arg); }
  /** A hard reload; resolves once the harness is ready again. */
  async reload() { await this.impl.reload(); await this.ready(); }
  /** Close the tab; closing it again does nothing. */
  async close() {
    if (this.closed) return;
    this.closed = true;
    await this.impl.close();
  }
  /** End the tab's renderer process at once (no pagehide, no unload: a crash), then close
   *  what is left of the tab. Chromium: CDP's Page.crash. Firefox and WebKit: SIGKILL to the
   *  content process the tab was found to run in when it opened. */
  async kill() {
    await this.impl.kill();
    await sleep(500);
    await this.close().catch(() => {});
  }
  async ready(timeoutMs = 120_000) {
    await until(() => this.impl.evaluate("() => window.pyReady === true", null), timeoutMs, "Pyodide on the page");
  }
}

/** The parent of process `pid` (0 once it is gone). */
function parentOf(pid) {
  try {
    return Number(readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /s, "").split(" ")[1]);
  } catch { return 0; }
}

/** Whether process `pid` descends from process `root`. */
function descends(pid, root) {
  for (let p = pid; p > 1; p = parentOf(p)) if (p === root) return true;
  return false;
}

/** Resident memory (kB) of each process under `root` whose command line contains `marker`. */
function processes(marker, root) {
  const found = new Map();
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(marker) || !descends(Number(pid), root)) continue;
      const rss = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      found.set(Number(pid), rss ? Number(rss[1]) : 0);
    } catch { /* the process ended meanwhile */ }
  }
  return found;
}

/** The content process a page just loaded Pyodide into: the one that grew most (Pyodide adds
 *  well over 60 MB) among those marked `marker`, given their sizes `before` the page opened.
 *  Refuses to guess when no process grew that much. */
function grownProcess(marker, root, before) {
  let best = null;
  let growth = 0;
  for (const [pid, rss] of processes(marker, root)) {
    const grew = rss - (before.get(pid) ?? 0);
    if (grew > growth) { best = pid; growth = grew; }
  }
  if (best === null || growth < 60_000) {
    throw new Error(`cannot tell which ${marker} process runs the tab (largest growth ${growth} kB)`);
  }
  return best;
}

/** A free TCP port on loopback. */
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, "127.0.0.1", () => { const { port } = srv.address(); srv.close(() => resolve(port)); });
    srv.on("error", reject);
  });
}

// ------------------------------------------------------------------ puppeteer: Chromium, Firefox

async function launchPuppeteer(name, baseURL) {
  const options = name === "firefox"
    ? { browser: "firefox", executablePath: BINARIES.firefox, headless: true,
        extraPrefsFirefox: { "network.proxy.type": 0, "app.update.enabled": false,
                             "browser.shell.checkDefaultBrowser": false } }
    : { browser: "chrome", executablePath: BINARIES.chromium, headless: true, args: CHROMIUM_ARGS,
        userDataDir: mkdtempSync(path.join(tmpdir(), "pyjobq-chromium-")) };
  const browser = await puppeteer.launch({ ...options, protocolTimeout: 180_000 });
  const version = await browser.version();
  return {
    name, version, lost: false,
    async open(url, { ready = true } = {}) {
      const page = await browser.newPage();
      page.on("console", (msg) => { if (msg.type() === "error" && process.env.ENGINES_VERBOSE) console.log(`[${name}] ${msg.text()}`); });
      const root = browser.process()?.pid;
      const before = name === "firefox" ? processes(FIREFOX_CONTENT, root) : null;
      await page.goto(baseURL + url);
      let pid = null;
      const tab = new Tab({
        evaluate: (fnSource, arg) => page.evaluate(`(${fnSource})(${JSON.stringify(arg)})`),
        reload: () => page.reload(),
        close: () => page.close(),
        kill: async () => {
          if (name === "firefox") process.kill(pid, "SIGKILL");
          else {
            // Page.crash never answers (the renderer is gone): not awaited.
            (await page.createCDPSession()).send("Page.crash").catch(() => {});
          }
        },
      });
      if (ready) {
        await tab.ready();
        if (before) pid = grownProcess(FIREFOX_CONTENT, root, before);
      }
      return tab;
    },
    quit: () => browser.close(),
  };
}

// ------------------------------------------------------------------ WebDriver classic: WebKit

async function launchWebKit(baseURL) {
  const port = await freePort();
  const driver = spawn(BINARIES.webkit, [`--port=${port}`, "--host=127.0.0.1"], { stdio: "ignore" });
  await until(async () => (await fetch(`http://127.0.0.1:${port}/status`)).ok, 15_000, "WebKitWebDriver");
  const browser = await remote({
    hostname: "127.0.0.1", port, logLevel: "silent",
    connectionRetryTimeout: 180_000,
    capabilities: {
      browserName: "MiniBrowser",
      "wdio:enforceWebDriverClassic": true,
      "webkitgtk:browserOptions": { binary: MINIBROWSER, args: ["--automation"] },
    },
  });
  await browser.setTimeout({ script: 170_000 });
  const caps = browser.capabilities;
  const version = `WebKitGTK ${caps.browserVersion || "?"}`;
  // The session's first window stays open on about:blank: closing a case's last tab must not
  // end the session.
  // Classic WebDriver runs scripts in the current window only: each call switches to its tab.
  let current = null;
  const on = async (handle) => { if (current !== handle) { await browser.switchToWindow(handle); current = handle; } };
  const engine = {
    name: "webkit", version, lost: false,
    async open(url, { ready = true } = {}) {
      const before = processes(WEBKIT_CONTENT, driver.pid);
      const { handle } = await browser.createWindow("window");
      await on(handle);
      await browser.url(baseURL + url);
      let pid = null;
      const tab = new Tab({
        evaluate: async (fnSource, arg) => {
          await on(handle);
          return browser.executeAsync(
            `const done = arguments[arguments.length - 1];
             Promise.resolve((${fnSource})(${JSON.stringify(arg)})).then(done, (e) => done({ __error: String(e && e.stack || e) }));`,
          ).then((v) => { if (v && v.__error) throw new Error(v.__error); return v; });
        },
        reload: async () => { await on(handle); await browser.refresh(); },
        close: async () => {
          await on(handle);
          await browser.closeWindow();
          current = null;
          const left = await browser.getWindowHandles();
          if (left.length) await on(left[0]);
        },
        // WebKitWebDriver ends its session when a page's process dies (the other windows
        // run on): the engine says so, and the runner starts a new session after the case.
        kill: async () => { process.kill(pid, "SIGKILL"); engine.lost = true; },
      });
      if (ready) {
        await tab.ready();
        pid = grownProcess(WEBKIT_CONTENT, driver.pid, before);
      }
      return tab;
    },
    async quit() {
      try { await browser.deleteSession(); } finally { driver.kill(); }
    },
  };
  return engine;
}

/** Launch `name` ("chromium", "firefox" or "webkit") against the site at `baseURL`. */
export async function launch(name, baseURL) {
  if (!existsSync(BINARIES[name])) {
    throw new Error(`${name}: ${BINARIES[name]} is missing — run \`make setup\` (it installs the engines from Debian)`);
  }
  if (name === "webkit") return launchWebKit(baseURL);
  return launchPuppeteer(name, baseURL);
}

export const ENGINES = ["chromium", "firefox", "webkit"];
