// The three engines behind one small interface, so each conformance case is written once:
//   const engine = await launch("firefox");
//   const tab = await engine.open("/tests/harness.html");  // waits for window.pyReady
//   await tab.py("1 + 1");  await tab.reload();  await tab.close();  await engine.quit();
// Chromium and Firefox are driven by puppeteer-core (CDP and WebDriver BiDi), WebKit by a
// classic WebDriver client (webdriverio) talking to WebKitGTK's WebKitWebDriver, whose
// MiniBrowser runs under Xvfb. Every browser is the machine's own (Debian packages): nothing
// is downloaded.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
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
  async ready(timeoutMs = 120_000) {
    await until(() => this.impl.evaluate("() => window.pyReady === true", null), timeoutMs, "Pyodide on the page");
  }
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
    name, version,
    async open(url) {
      const page = await browser.newPage();
      page.on("console", (msg) => { if (msg.type() === "error" && process.env.ENGINES_VERBOSE) console.log(`[${name}] ${msg.text()}`); });
      await page.goto(baseURL + url);
      const tab = new Tab({
        evaluate: (fnSource, arg) => page.evaluate(`(${fnSource})(${JSON.stringify(arg)})`),
        reload: () => page.reload(),
        close: () => page.close(),
      });
      await tab.ready();
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
    hostname: "127.0.0.1", port, logLevel: "error",
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
  return {
    name: "webkit", version,
    async open(url) {
      const { handle } = await browser.createWindow("window");
      await on(handle);
      await browser.url(baseURL + url);
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
      });
      await tab.ready();
      return tab;
    },
    async quit() {
      try { await browser.deleteSession(); } finally { driver.kill(); }
    },
  };
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
