// @ts-check
// Frozen tabs (issue: a frozen or back/forward-cached tab held the lease and stopped the queue).
// Playwright's own pages cannot be frozen (focus emulation keeps them visible, so CDP
// Page.setWebLifecycleState is a silent no-op; docs/decisions.md), so this spec launches
// /usr/bin/chromium itself (helpers.js, ownChromium) with --remote-debugging-port and connects with
// connectOverCDP(..., { noDefaults: true }). The test server is the config's webServer.
const { test, expect } = require("@playwright/test");
const { configurePython, openHarness, py, resetServer, serverLog, holding, release, ownChromium, setLifecycleState } = require("./helpers");

async function openQueue(context, baseURL) {
  return openHarness(context, { url: `${baseURL}/tests/harness.html`, setup: configurePython() });
}

test.describe("frozen tabs", () => {
  test.setTimeout(240_000);
  const chrome = ownChromium("lifecycle");

  test("a frozen tab hands the lease over, its run is not doubled, and it finishes once on resume", async ({ baseURL, request }) => {
    await resetServer(request);
    const { browser, context } = await chrome.connect();
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
    await setLifecycleState(context, a, "frozen");

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
    await setLifecycleState(context, a, "active");
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
