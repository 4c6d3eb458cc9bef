// Run the conformance suite (tests/engines/conformance.mjs) in each engine, one after the
// other (two cores: never two browsers at once):
//   node tests/engines/run.mjs [chromium] [firefox] [webkit]     (default: all three)
// WebKit's MiniBrowser needs a display: `make engines` runs this under xvfb-run. It starts
// its own test server (tests/server.py on build/site, port ENGINES_PORT, default 8131). Writes
// build/engines/results.json (each case's result per engine, with the engines' versions) and
// prints the table the README shows; exits 1 when any case failed anywhere.
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
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
  const engine = await launch(name, BASE);
  results.engines[name] = engine.version;
  results.results[name] = {};
  console.log(`== ${name}: ${engine.version}`);
  try {
    for (const [i, c] of CASES.entries()) {
      if (only && !c.name.includes(only)) continue;
      const tabs = [];
      const open = async () => {
        const tab = await engine.open("/tests/harness.html");
        tabs.push(tab);
        return tab;
      };
      const tag = `${name}-${i}-${Date.now()}`;
      const names = { db: `conf-${tag}`, lock: `conf-lock-${tag}`, channel: `conf-ch-${tag}` };
      const started = Date.now();
      await server.reset();
      let verdict = "pass";
      try {
        await c.run({ open, server, names, engine: name });
      } catch (e) {
        verdict = "fail";
        failed++;
        console.log(`  ✘ ${c.name}\n    ${String(e && e.stack || e).split("\n").slice(0, 6).join("\n    ")}`);
      }
      for (const tab of tabs) await tab.close().catch(() => {});
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
const cols = Object.keys(results.engines);
console.log(`\n| behaviour | ${cols.map((n) => `${n} (${results.engines[n]})`).join(" | ")} |`);
console.log(`| --- | ${cols.map(() => "---").join(" | ")} |`);
for (const c of results.cases) {
  console.log(`| ${c} | ${cols.map((n) => results.results[n][c] ?? "not run").join(" | ")} |`);
}
console.log(failed ? `\n${failed} failed` : "\nall passed");
process.exit(failed ? 1 : 0);
