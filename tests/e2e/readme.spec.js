// @ts-check
// The README's quickstart runs as written: its app.py block, on a page with Pyodide and pyjobq.
const fs = require("fs");
const path = require("path");
const { test, expect } = require("@playwright/test");
const { py, resetServer } = require("./helpers");

function quickstartPython() {
  const readme = fs.readFileSync(path.join(__dirname, "..", "..", "README.md"), "utf8");
  const after = readme.split("with `app.py`:")[1];
  const match = after && after.match(/```python\n([\s\S]*?)```/);
  if (!match) throw new Error("README.md has no app.py quickstart block");
  return match[1];
}

test("the README quickstart runs as written", async ({ page, baseURL, request }) => {
  await resetServer(request);
  await page.context().route((url) => !url.href.startsWith(/** @type {string} */ (baseURL)), (r) => r.abort());
  const printed = [];
  page.on("console", (msg) => printed.push(msg.text()));
  await page.goto("/tests/harness.html");
  await page.waitForFunction(() => window.pyReady === true, null, { timeout: 30_000 });
  await py(page, quickstartPython());
  const result = await py(page, `json.dumps([outcome.status, outcome.http_status, outcome.result["body"]])`);
  expect(result).toEqual(["done", 200, { text: "hello" }]);
  expect(printed.some((line) => line.startsWith("done 200"))).toBeTruthy();
  expect(printed).toContain("{'width': 64}");
  // It ran under the names it configured.
  const dbs = await page.evaluate(async () => (await indexedDB.databases()).map((d) => d.name));
  expect(dbs).toContain("notes-jobs");
});
