// @ts-check
// Frozen tabs (issue: a frozen or back/forward-cached tab held the lease and stopped the queue).
// Playwright's own pages cannot be frozen (focus emulation keeps them visible, so CDP
// Page.setWebLifecycleState is a silent no-op; docs/decisions.md), so this spec launches
// /usr/bin/chromium itself with --remote-debugging-port and connects with
// connectOverCDP(..., { noDefaults: true }). The test server is the config's webServer.
const { test, expect, chromium } = require("@playwright/test");
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");
const { configurePython, openHarness, py, resetServer, serverLog, holding, release } = require("./helpers");

const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const FLAGS = [...require("../chromium-flags.json"), "--headless", "--remote-debugging-port=0"];

/** Launch chromium ourselves; resolve with the process and its DevTools websocket URL. */
async function launchChromium() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "pyjobq-lifecycle-"));
  const proc = spawn(CHROMIUM, [...FLAGS, `--user-data-dir=${profile}`, "about:blank"], { stdio: ["ignore", "ignore", "pipe"] });
  const endpoint = await new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(() => reject(new Error(`no DevTools endpoint from chromium:\n${seen}`)), 30_000);
    proc.stderr.on("data", (chunk) => {
      seen += chunk;
      const m = /DevTools listening on (ws:\/\/\S+)/.exec(seen);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on("exit", (code) => reject(new Error(`chromium exited (${code}):\n${seen}`)));
  });
  return { proc, endpoint, profile };
}

async function openQueue(context, baseURL) {
  return openHarness(context, { url: `${baseURL}/tests/harness.html`, setup: configurePython() });
}

async function setState(context, page, state) {
  const cdp = await context.newCDPSession(page);
  await cdp.send("Page.setWebLifecycleState", { state });
  await cdp.detach();
}

test.describe("frozen tabs", () => {
  test.setTimeout(240_000);
  let chrome;
  test.beforeAll(async () => { chrome = await launchChromium(); });
  test.afterAll(async () => {
    if (chrome) {
      const exited = new Promise((resolve) => chrome.proc.once("exit", resolve));
      chrome.proc.kill();
      await exited;
      // Chromium's helper processes can still be writing the profile just after the browser
      // process exits (seen: ENOTEMPTY); retry, and never fail the test over a temp folder.
      try {
        fs.rmSync(chrome.profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
      } catch (error) {
        console.log(`left the temporary profile ${chrome.profile}: ${error}`);
      }
    }
  });

  test("a frozen tab hands the lease over, its run is not doubled, and it finishes once on resume", async ({ baseURL, request }) => {
    await resetServer(request);
    const browser = await chromium.connectOverCDP(chrome.endpoint, { noDefaults: true });
    const context = browser.contexts()[0];
    const a = await openQueue(context, baseURL);
    const b = await openQueue(context, baseURL);

    // Tab A takes a long job: the server holds it until released.
    const longId = await py(a, `
long_job = queue.enqueue_fetch("POST", "/api/hold/long", {"n": 1}, type="decode", label="long")
long_job.id`);
    await expect.poll(() => holding(request), { timeout: 60_000 }).toContain("long");

    await a.evaluate(() => {
      window.lifecycle = [];
      for (const kind of ["freeze", "resume"]) document.addEventListener(kind, () => window.lifecycle.push(kind));
    });
    await setState(context, a, "frozen");

    // B takes over the lease and runs other work while A sits frozen.
    const quick = await py(b, `
job = queue.enqueue_fetch("POST", "/api/echo/quick", {"n": 2}, type="save")
out = await asyncio.wait_for(job.done, 60)
out.status`);
    expect(quick).toBe("done");
    const seenFromB = await py(b, `
recs = [r for r in await queue.query_all() if r["id"] == ${JSON.stringify(longId)}]
json.dumps([(r["status"], r["attempts"], r["owner"] is not None) for r in recs])`);
    expect(seenFromB).toEqual([["running", 1, true]]);
    // The server logs a request when it answers: the held one is still the only one in.
    expect(await holding(request)).toEqual(["long"]);

    // A resumes; its held request completes, and the job is done once, on its first attempt.
    await setState(context, a, "active");
    // The freeze really took (on a Playwright page it is a silent no-op): A saw both events.
    expect(await a.evaluate(() => window.lifecycle)).toEqual(["freeze", "resume"]);
    await release(request, "long");
    const longOut = await py(a, `
out = await asyncio.wait_for(long_job.done, 60)
json.dumps([out.status, out.result["path"]])`);
    expect(longOut).toEqual(["done", "/api/hold/long"]);
    const record = await py(b, `
recs = [r for r in await queue.query_all() if r["id"] == ${JSON.stringify(longId)}]
json.dumps([(r["status"], r["attempts"]) for r in recs])`);
    expect(record).toEqual([["done", 1]]);
    const log = await serverLog(request);
    expect(log.filter((r) => r.path === "/api/hold/long")).toHaveLength(1);

    // And A can take the lease back: a job it files now runs.
    const again = await py(a, `
job = queue.enqueue_fetch("POST", "/api/echo/after", None, type="save")
(await asyncio.wait_for(job.done, 60)).status`);
    expect(again).toBe("done");
    await a.close();
    await b.close();
    await browser.close();
  });
});
