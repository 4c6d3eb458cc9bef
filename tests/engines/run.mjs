// Run the conformance suite (tests/engines/conformance.mjs) in each engine, one after the
// other (two cores: never two browsers at once):
//   node tests/engines/run.mjs [chromium] [firefox] [webkit]     (default: all three)
// WebKit's MiniBrowser needs a display: `make engines` runs this under xvfb-run. It starts
// its own test server (tests/server.py on build/site, port ENGINES_PORT, default 8131);
// ENGINES_CASE=<regular expression> runs only the cases whose names match. Writes
// build/engines/results.json (each case's result per engine, with the engines' versions) and
// prints the table the README shows; exits 1 when any case failed anywhere, or when a run of
// every case in every engine measured other than README.md's table shows.
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { CASES } from "./conformance.mjs";
import { ENGINES, launch, until } from "./drivers.mjs";

const PORT = Number(process.env.ENGINES_PORT || 8131);
const BASE = `http://127.0.0.1:${PORT}`;
const serverProcess = spawn(".venv/bin/python", ["tests/server.py", "--port", String(PORT), "--root", "build/site"],
                            { stdio: ["ignore", "ignore", "inherit"] });
process.on("exit", () => serverProcess.kill());
await until(async () => (await fetch(`${BASE}/__control/log`)).ok, 20_000, `the test server on port ${PORT}`);
const only = process.env.ENGINES_CASE || "";

async function control(path, body) {
  const res = await fetch(BASE + path, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status}`);
  return res.headers.get("content-type")?.includes("json") ? res.json() : res.text();
}

const server = {
  reset: () => control("/__control/reset", {}),
  log: () => control("/__control/log"),
  async sent(path) { return (await server.log()).filter((e) => e.path === path); },
  holding: () => control("/__control/holding"),
  release: (key) => control("/__control/release", { key }),
  script: (key, responses) => control("/__control/script", { key, responses }),
};

const engines = process.argv.slice(2).length ? process.argv.slice(2) : ENGINES;
const results = { engines: {}, cases: CASES.map((c) => c.name), results: {} };
let failed = 0;
for (const name of engines) {
  let engine = await launch(name, BASE);
  results.engines[name] = engine.version;
  results.results[name] = {};
  console.log(`== ${name}: ${engine.version}`);
  try {
    for (const [i, c] of CASES.entries()) {
      if (only && !new RegExp(only).test(c.name)) continue;
      const tabs = [];
      const open = async (url = "/tests/harness.html", options = {}) => {
        const tab = await engine.open(url, options);
        tabs.push(tab);
        return tab;
      };
      const tag = `${name}-${i}-${Date.now()}`;
      const names = { db: `conf-${tag}`, lock: `conf-lock-${tag}`, channel: `conf-ch-${tag}` };
      const started = Date.now();
      await server.reset();
      let verdict = "pass";
      try {
        await c.run({ open, server, names, engine: name, engineLost: () => engine.lost });
      } catch (e) {
        verdict = "fail";
        failed++;
        console.log(`  ✘ ${c.name}\n    ${String(e && e.stack || e).split("\n").slice(0, 6).join("\n    ")}`);
      }
      if (engine.lost) {
        await engine.quit().catch(() => {});
        engine = await launch(name, BASE);
      } else {
        for (const tab of tabs) await tab.close().catch(() => {});
      }
      const ms = Date.now() - started;
      results.results[name][c.name] = verdict;
      if (verdict === "pass") console.log(`  ✓ ${c.name} (${(ms / 1000).toFixed(1)} s)`);
    }
  } finally {
    await engine.quit().catch(() => {});
  }
}

mkdirSync("build/engines", { recursive: true });
writeFileSync("build/engines/results.json", JSON.stringify(results, null, 2) + "\n");

/** The engine's column heading: its name and major version, as the README shows it. */
function heading(name, version) {
  const major = (/(\d+(?:\.\d+)?)/.exec(version.replace(/^\D*/, "")) || ["?"])[0];
  if (name === "chromium") return `Chromium ${major.split(".")[0]}`;
  if (name === "firefox") return `Firefox ESR ${major.split(".")[0]}`;
  return `WebKitGTK ${major} (Safari's engine)`;
}

const cols = Object.keys(results.engines);
const table = [
  `| behaviour | ${cols.map((n) => heading(n, results.engines[n])).join(" | ")} |`,
  `| --- | ${cols.map(() => "---").join(" | ")} |`,
  ...results.cases.map((c) => `| ${c} | ${cols.map((n) => results.results[n][c] ?? "not run").join(" | ")} |`),
];
console.log(`\n${table.join("\n")}`);
console.log(failed ? `\n${failed} failed` : "\nall passed");

// A whole run is what README.md's table shows (its names may quote code in backticks).
let stale = false;
if (!only && cols.join() === ENGINES.join()) {
  const readme = readFileSync("README.md", "utf8").split("\n");
  const start = readme.findIndex((l) => l.startsWith("| behaviour |"));
  const shown = readme.slice(start).filter((l, i, all) => all.slice(0, i + 1).every((x) => x.startsWith("|")));
  stale = shown.map((l) => l.replaceAll("`", "")).join("\n") !== table.join("\n");
  if (stale) console.log("\nREADME.md's browser table is not what this run measured: replace it with the table above.");
}
process.exit(failed || stale ? 1 : 0);
