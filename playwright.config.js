// @ts-check
// Playwright Test config for pyjobq's multi-tab tests (tests/e2e).
// No browser download works here: drive Debian's chromium by path, with the flags that keep
// it from reaching for the network. The site under test is build/site (`make build`).
const { defineConfig } = require("@playwright/test");

// E2E_PORT / E2E_SITE: a private server and site, for running beside another engineer's run
// on the same machine (the default server is reused when it is already up).
const PORT = Number(process.env.E2E_PORT || 8123);
const SITE = process.env.E2E_SITE || "build/site";
const BASE_URL = `http://127.0.0.1:${PORT}`;
// One list for every launcher (tests/conftest.py, scripts/bench.mjs and demo.mjs, lifecycle.spec.js).
const CHROMIUM_ARGS = require("./tests/chromium-flags.json");

module.exports = defineConfig({
  testDir: "tests/e2e",
  outputDir: "build/test-results",
  // Generous on purpose: each page boots two Pyodides (page + scheduler worker) on a 2-core
  // machine, and the tests assert behaviour, never timings.
  timeout: 120_000,
  expect: { timeout: 30_000 },
  workers: 1, // 2-core machines; each page holds a ~160 MB Pyodide
  fullyParallel: false,
  forbidOnly: !!process.env.CI,
  retries: 0,
  reporter: "list",
  use: {
    baseURL: BASE_URL,
    headless: true,
    browserName: "chromium",
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
      args: CHROMIUM_ARGS,
    },
    trace: "retain-on-failure",
  },
  projects: [{ name: "chromium" }],
  webServer: {
    command: `.venv/bin/python tests/server.py --port ${PORT} --root ${SITE}`,
    url: `${BASE_URL}/__control/log`,
    reuseExistingServer: !process.env.CI,
    timeout: 30_000,
    stdout: "ignore",
    stderr: "pipe",
  },
});
