// @ts-check
// `make bench` must not rot, and CI must not run the full benchmark: this runs the same
// script and pages (scripts/bench.mjs, web/bench/) with tiny sizes, and checks the table's
// shape only — every row present, every ratio a finite number. It never asserts a timing.
const { test, expect } = require("@playwright/test");
const { execFile } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

const ROOT = path.resolve(__dirname, "..", "..");
const ROWS = [
  "one_type", "four_types", "cpu_four_types", "burst", "handshake_p50", "handshake_p99", "first_job",
  "first_job_late", "sw_drain", "volatile", "pass", "drain", "wasm_heap_page", "wasm_heap_worker",
  "py_objects", "proxies", "tab_memory",
];

test("the benchmark runs in smoke mode and prints every row as a finite ratio", async () => {
  test.setTimeout(600_000); // several Pyodide loads on a 2-core machine
  const out = path.join(ROOT, "build", "test-results", "bench-smoke");
  fs.rmSync(out, { recursive: true, force: true });
  const stdout = await new Promise((resolve, reject) => {
    execFile("node", [path.join(ROOT, "scripts", "bench.mjs"), "--smoke", "--out", out],
      { cwd: ROOT, timeout: 580_000, maxBuffer: 10 * 2 ** 20 },
      (error, so, se) => (error ? reject(new Error(`${error.message}\n${se}`)) : resolve(so)));
  });
  const report = JSON.parse(fs.readFileSync(path.join(out, "bench.json"), "utf8"));
  expect(report.meta.smoke).toBe(true);
  expect(report.rows.map((r) => r.key)).toEqual(ROWS);
  for (const row of report.rows) {
    expect(Number.isFinite(row.ratio), `${row.key} ratio ${row.ratio}`).toBe(true);
    expect(stdout).toContain(row.figure);
  }
  expect(fs.statSync(path.join(out, "bench.png")).size).toBeGreaterThan(1000);
});
