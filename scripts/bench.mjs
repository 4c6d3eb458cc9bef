#!/usr/bin/env node
// pyjobq benchmarks against the floor (`make bench`; DESIGN.md "Benchmarks").
//
// Every figure is measured in this run beside its baseline, and printed as a ratio.
// Drives /usr/bin/chromium (CHROMIUM_PATH) headless with the flags of playwright.config.js,
// serving build/site with tests/server.py on a free port. Writes build/bench.json and
// build/bench.png (an SVG chart screenshotted by the same Chromium: no network, no new deps).
//
//   node scripts/bench.mjs            the full sizes (1,000 jobs, 10,000 burst, 100,000 records)
//   node scripts/bench.mjs --smoke    tiny sizes (BENCH_SMOKE=1 too): proves the harness, not speed
//   --out DIR                         where bench.json / bench.png go (default build/)
//   --only PARTS                      a comma list of page-a, burst, pass, drain, loads, sw, tabs (default: all);
//                                     BENCH_SITE=DIR measures another built site (e.g. an older commit's)
//   --profile [N]                     no figures: N (default 300) persistent jobs of one type under
//                                     cProfile on the page and in the scheduler worker; prints both top lists
//                                     (BENCH_PROFILE_CALLERS=regex: who calls the matching functions)
//   --run "PY"                        no figures: the bench page's Python call PY, e.g. "await burst(10000)"
//   --cpuprofile [N]                  no figures: N (default 1000) persistent jobs of one type under V8's
//                                     sampling profiler in the scheduler worker's thread and the page's (CDP);
//                                     prints, for each thread, self time a job by kind (Python's wasm, Pyodide's
//                                     JavaScript, pyjobq's helpers, the browser's own) and the top functions;
//                                     BENCH_CPUPROFILE=PREFIX also writes PREFIX.worker.cpuprofile and
//                                     PREFIX.page.cpuprofile
//   --trace [N]                       no figures: N persistent jobs of one type; per job, how long each
//                                     side holds it and each message travels (medians); BENCH_PROBE=FILE
//                                     also runs FILE's Python in the idle worker (runPythonAsync) after them
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);
const { chromium } = require("@playwright/test");
// The same Chromium flags as the Playwright tests.
const CHROMIUM_ARGS = require(path.join(ROOT, "playwright.config.js")).use.launchOptions.args;

const argv = process.argv.slice(2);
const SMOKE = argv.includes("--smoke") || ["1", "true", "yes"].includes(String(process.env.BENCH_SMOKE || "").toLowerCase());
const OUT = path.resolve(ROOT, argv.includes("--out") ? argv[argv.indexOf("--out") + 1] : "build");
const SITE = path.resolve(ROOT, process.env.BENCH_SITE || "build/site"); // BENCH_SITE: another built site
const PARTS = ["page-a", "burst", "pass", "drain", "loads", "sw", "tabs"];
const ONLY = argv.includes("--only") ? argv[argv.indexOf("--only") + 1].split(",") : PARTS;
for (const part of ONLY) if (!PARTS.includes(part)) throw new Error(`--only: unknown part ${part} (one of ${PARTS.join(", ")})`);
const want = (part) => ONLY.includes(part);

const SIZES = SMOKE
  ? { jobs: 20, burst: 50, roundTrips: 20, records: 300, small: 100, passes: 3, volatile: 20, leak: 20, loads: 1, tabs: 2, sw: 5 }
  : { jobs: 1000, burst: 10000, roundTrips: 1000, records: 100000, small: 100, passes: 20, volatile: 1000, leak: 10000, loads: 3, tabs: 3, sw: 100 };

// performance.now() is coarsened to 0.1 ms on a page that is not cross-origin isolated: a
// round trip that reads 0 is counted as one tick in the ratios.
const CLOCK_MS = 0.1;
const log = (...a) => console.error("[bench]", ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)]; };

// ---------------------------------------------------------------- server and browser

async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => { const { port } = srv.address(); srv.close(() => resolve(port)); });
    srv.on("error", reject);
  });
}

async function startServer() {
  const port = await freePort();
  const py = fs.existsSync(path.join(ROOT, ".venv/bin/python")) ? path.join(ROOT, ".venv/bin/python") : "python3";
  // --trace and --profile time sub-millisecond steps: cross-origin isolated, the clock reads 5 µs
  // rather than 100 µs. The figures of a bench run keep the clock every page has.
  const isolated = argv.includes("--trace") || argv.includes("--profile") ? ["--isolated"] : [];
  const proc = spawn(py, [path.join(ROOT, "tests/server.py"), "--port", String(port), "--root", SITE, ...isolated], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  proc.stderr.on("data", (d) => { stderr += d; });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    try { if ((await fetch(`${base}/__control/log`)).ok) return { base, proc }; } catch { /* not up yet */ }
    if (proc.exitCode !== null) break;
    await sleep(50);
  }
  proc.kill();
  throw new Error(`tests/server.py did not start on ${base}: ${stderr}`);
}

/** A bench page with its queue started. `offlineAware`: the transport fails the way fetch does
 *  while `navigator.onLine` is false (a thrown error, no HTTP status) — the drain row's page. */
async function openBenchPage(context, base, db, { offlineAware = false } = {}) {
  const page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error" && !String(m.location().url).endsWith("/favicon.ico")) log(`[page error] ${m.text()}`);
  });
  page.on("pageerror", (e) => log(`[page exception] ${e}`));
  await page.goto(`${base}/bench/index.html`);
  await page.waitForFunction(() => window.pyReady === true, null, { timeout: 120_000 });
  // A transport answering at once: the figures measure the queue, not a network.
  await py(page, `
import asyncio, json, time
import js, pyjobq
from pyjobq.testing import Response

async def transport(method, path, body):
${offlineAware ? `    if not js.navigator.onLine:
        # What fetch does with no network: it rejects before a request leaves, with no status.
        raise OSError("Failed to fetch (the page is offline)")
` : ""}    return Response(200, {"ok": True})

pyjobq.configure(db_name=${JSON.stringify(db)}, lock_name=${JSON.stringify(db + "-lock")},
                 channel_name=${JSON.stringify(db)}, transport=transport)
from pyjobq import queue

async def persistent(n, types, **kw):
    t0 = js.performance.now()
    jobs = [queue.enqueue_fetch("POST", "/bench", {"i": i}, type=f"t{i % types}", **kw) for i in range(n)]
    outs = await asyncio.gather(*(j.done for j in jobs))
    ms = js.performance.now() - t0
    return json.dumps({"ms": ms, "jobs_per_s": n / ms * 1000, "not_done": sum(o.status != "done" for o in outs)})

async def in_batches(total, batch, types):
    # Enqueued a batch at a time, so a long run stays a steady state rather than one backlog.
    not_done = 0
    for _ in range(max(1, total // batch)):
        not_done += json.loads(await persistent(batch, types))["not_done"]
    return json.dumps({"not_done": not_done})

async def burst(n):
    t0 = js.performance.now()
    jobs = [queue.enqueue_fetch("POST", "/bench", {"i": i}, delay_ms=3_600_000) for i in range(n)]
    await asyncio.gather(*(j.stored for j in jobs))
    return json.dumps({"ms": js.performance.now() - t0})

async def one_job():
    t0 = js.performance.now()
    out = await queue.enqueue_fetch("POST", "/bench", None, type="probe").done
    return json.dumps({"ms": js.performance.now() - t0, "status": out.status})

async def noop(signal):
    return None

async def volatile(n):
    t0 = js.performance.now()
    jobs = [queue.enqueue(noop) for _ in range(n)]
    outs = await asyncio.gather(*(j.done for j in jobs))
    ms = js.performance.now() - t0
    return json.dumps({"ms": ms, "jobs_per_s": n / ms * 1000, "not_done": sum(o.status != "done" for o in outs)})

async def bare_noop():
    return None

async def bare_tasks(n):
    # One lane runs its jobs one after another: so do these tasks.
    t0 = js.performance.now()
    for _ in range(n):
        await asyncio.ensure_future(bare_noop())
    ms = js.performance.now() - t0
    return json.dumps({"ms": ms, "jobs_per_s": n / ms * 1000})
"ok"
`);
  // Start the queue (and its worker) with one job, so later figures exclude the load.
  const first = await py(page, "await one_job()");
  if (first.status !== "done") throw new Error(`the warm-up job ended ${first.status}`);
  return page;
}

const py = (page, code) => page.evaluate((c) => window.py(c), code);

// The drain row's Python (on a page opened with offlineAware). drain_enqueue files the jobs
// while the page is offline and returns once every one has failed with no network at least
// once and is pending again (spec: "A failure with no network costs no attempt"); the
// caller then goes online, and drain_finish says how long from the `online` event until
// the last `done` resolved.
const DRAIN_PY = `
drain_jobs = []
drain_ids = set()
drain_waited = set()     # failed with no network at least once
drain_attempts = {}      # attempts in each job's latest update
drain_status = {}        # status in each job's latest update
drain_tries = []         # when each failed try with no network was published
drain_end = []

def _drain_note(u):
    i = u.get("id")
    if i not in drain_ids:
        return
    if u.get("attempts") is not None:
        drain_attempts[i] = u.get("attempts")
    was, drain_status[i] = drain_status.get(i), u.get("status")
    # running -> pending, offline: a try that failed with no network (the online event's
    # "due now" republishes the pending record too; that is no try)
    if was == "running" and u.get("status") == "pending" and u.get("code") == "offline":
        drain_tries.append(js.performance.now())
        drain_waited.add(i)

queue.on_update(_drain_note)

async def drain_enqueue(n, types, timeout_s=1800):
    t0 = js.performance.now()
    drain_jobs[:] = [queue.enqueue_fetch("POST", "/bench/drain", {"i": i}, type=f"t{i % types}") for i in range(n)]
    drain_ids.update(j.id for j in drain_jobs)
    while len(drain_waited) < n:
        if js.performance.now() - t0 > timeout_s * 1000:
            raise TimeoutError(f"only {len(drain_waited)} of {n} jobs failed offline")
        await asyncio.sleep(0.05)
    left = [n]

    def one(_future):
        left[0] -= 1
        if left[0] == 0:
            drain_end.append(js.performance.now())

    for j in drain_jobs:
        j.done.add_done_callback(one)
    return json.dumps({"spell_ms": js.performance.now() - t0, "tries_offline": len(drain_tries),
                       "done_offline": sum(j.done.done() for j in drain_jobs)})

async def drain_finish():
    outs = await asyncio.gather(*(j.done for j in drain_jobs))
    online_at = js.window.benchOnlineAt
    if online_at is None:
        raise RuntimeError("no online event reached the page")
    return json.dumps({"ms": drain_end[0] - online_at, "not_done": sum(o.status != "done" for o in outs),
                       "tries_offline": len(drain_tries),
                       "tries_offline_after_online": sum(t > online_at for t in drain_tries),
                       "max_attempts": max(drain_attempts.values(), default=None)})
"ok"
`;
const bench = (page, fn, ...args) => page.evaluate(([f, a]) => window.bench[f](...a), [fn, args]);

// ---------------------------------------------------------------- memory of the browser's processes

function descendants(rootPid) {
  const children = new Map();
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (!children.has(ppid)) children.set(ppid, []);
      children.get(ppid).push(Number(name));
    } catch { /* gone */ }
  }
  const out = [];
  const walk = (pid) => { out.push(pid); for (const c of children.get(pid) || []) walk(c); };
  walk(rootPid);
  return out;
}

/** This script's Chromium processes: its descendants whose program is a Chromium. */
function chromiumPids() {
  return descendants(process.pid).filter((pid) => {
    try { return /chrom/i.test(fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0]); } catch { return false; }
  });
}

/** Proportional set size (MB) of this script's Chromium and all its processes; null off Linux. */
function browserPssMB() {
  if (!fs.existsSync("/proc/self/smaps_rollup")) return null;
  let kb = 0;
  for (const pid of chromiumPids()) {
    try {
      const m = /^Pss:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"));
      if (m) kb += Number(m[1]);
    } catch { /* gone */ }
  }
  return kb / 1024;
}

/** CPU seconds this script's Chromium processes have used so far (every thread); null off Linux. */
function browserCpuSeconds() {
  if (!fs.existsSync("/proc/self/stat")) return null;
  const tick = 100; // USER_HZ on Linux
  let ticks = 0;
  for (const pid of chromiumPids()) {
    try {
      const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = f.slice(f.lastIndexOf(")") + 2).split(" ");
      ticks += Number(fields[11]) + Number(fields[12]); // utime, stime
    } catch { /* gone */ }
  }
  return ticks / tick;
}

// ---------------------------------------------------------------- the figures

async function measure(browser, base, stamp) {
  const r = {};
  const ctx = await browser.newContext();

  // Persistent throughput, handshake, volatile, leaks: one page, one queue.
  if (want("page-a")) {
  log("page A: persistent throughput");
  const a = await openBenchPage(ctx, base, `bench-a-${stamp}`);
  // Each throughput row also reads the CPU every Chromium thread spent in it, a job: on a
  // machine of few cores the rows with lanes side by side are bound by it, not by latency.
  const cpuPerJob = async (call) => {
    const cpu0 = browserCpuSeconds();
    const out = await call();
    if (cpu0 !== null) out.cpu_ms_per_job = ((browserCpuSeconds() - cpu0) * 1000) / SIZES.jobs;
    return out;
  };
  const floor1 = await cpuPerJob(() => bench(a, "floorJobs", SIZES.jobs, `bench-floor-${stamp}`));
  await bench(a, "ask", { cmd: "trace" }); // clear
  r.one_type = await cpuPerJob(() => py(a, `await persistent(${SIZES.jobs}, 1)`));
  r.handshake = await bench(a, "handshakes");
  r.round_trip = await bench(a, "roundTrips", SIZES.roundTrips);
  r.four_types = await cpuPerJob(() => py(a, `await persistent(${SIZES.jobs}, 4)`));
  const floor2 = await cpuPerJob(() => bench(a, "floorJobs", SIZES.jobs, `bench-floor-${stamp}`));
  r.floor = { runs: [floor1.jobs_per_s, floor2.jobs_per_s], jobs_per_s: (floor1.jobs_per_s + floor2.jobs_per_s) / 2,
    cpu_ms_per_job: (floor1.cpu_ms_per_job + floor2.cpu_ms_per_job) / 2 };

  log("page A: volatile");
  r.bare_tasks = await py(a, `await bare_tasks(${SIZES.volatile})`);
  r.volatile = await py(a, `await volatile(${SIZES.volatile})`);

  log(`page A: memory across ${SIZES.leak} jobs`);
  await py(a, `await persistent(${Math.min(100, SIZES.leak)}, 1)`); // warm
  const before = { page: await bench(a, "pageMemory", { trackProxies: true }), worker: await bench(a, "ask", { cmd: "memory", track: true }) };
  // Sampled halfway too: a proxy or two made once (a cache, a listener) is not growth; the
  // proxies row is what the second half added, per job.
  const half = Math.floor(SIZES.leak / 2);
  const batch = Math.min(100, half);
  const leak1 = await py(a, `await in_batches(${half}, ${batch}, 4)`);
  await sleep(200);
  const mid = { page: await bench(a, "pageMemory"), worker: await bench(a, "ask", { cmd: "memory" }) };
  const leak2 = await py(a, `await in_batches(${SIZES.leak - half}, ${batch}, 4)`);
  await sleep(200);
  const after = { page: await bench(a, "pageMemory"), worker: await bench(a, "ask", { cmd: "memory" }) };
  r.memory = { jobs: SIZES.leak, half, not_done: leak1.not_done + leak2.not_done, before, mid, after };
  await a.close();
  }

  if (want("burst")) {
  log("page B: enqueue burst");
  const b = await openBenchPage(ctx, base, `bench-b-${stamp}`);
  r.raw_put = await bench(b, "rawPut", SIZES.burst, `bench-raw-${stamp}`);
  r.burst = await py(b, `await burst(${SIZES.burst})`);
  await b.close();
  }

  if (want("pass")) {
  log("page C: a pass among 100 records, then among many");
  const c = await openBenchPage(ctx, base, `bench-c-${stamp}`);
  const passes = async () => {
    const xs = [];
    for (let i = 0; i < SIZES.passes; i++) xs.push((await py(c, "await one_job()")).ms);
    return { ms: median(xs), runs: xs };
  };
  const db = `bench-c-${stamp}`;
  // Mostly done, a few pending (waiting out a backoff) and failed: 100 in all (the probe
  // jobs already there count as done).
  await bench(c, "seed", db, { done: SIZES.small - 11, pending: 5, failed: 5, prefix: "small" });
  await passes(); // warm
  r.pass_small = { ...(await passes()), records: await bench(c, "seed", db, {}) };
  await bench(c, "seed", db, { done: SIZES.records - SIZES.small - 10, pending: 5, failed: 5, prefix: "large" });
  await sleep(SMOKE ? 0 : 3000); // let the big write settle (LevelDB compaction) before timing
  await passes(); // warm, as for the small store
  r.pass_large = { ...(await passes()), records: await bench(c, "seed", db, {}) };
  await c.close();
  }
  await ctx.close();

  if (want("drain")) {
  // Its own context: setOffline is per context, and it must not reach the pages above.
  log(`page D: drain after reconnect (${SIZES.jobs} jobs, four types, through an offline spell)`);
  const dc = await browser.newContext();
  const d = await openBenchPage(dc, base, `bench-d-${stamp}`, { offlineAware: true });
  const floorBefore = await bench(d, "floorJobs", SIZES.jobs, `bench-floor-d-${stamp}`);
  await py(d, DRAIN_PY);
  await dc.setOffline(true); // navigator.onLine false, `offline` fired, on the page and in its workers
  await d.waitForFunction(() => navigator.onLine === false);
  r.drain_spell = await py(d, `await drain_enqueue(${SIZES.jobs}, 4)`);
  if (r.drain_spell.done_offline) throw new Error(`drain: ${r.drain_spell.done_offline} jobs were done while offline`);
  // The event's own timestamp (same clock as performance.now()), whichever listener runs first.
  await d.evaluate(() => {
    window.benchOnlineAt = null;
    addEventListener("online", (e) => { window.benchOnlineAt = e.timeStamp; }, { once: true });
  });
  await dc.setOffline(false);
  r.drain = await py(d, "await drain_finish()");
  if (r.drain.not_done) throw new Error(`drain: ${r.drain.not_done} jobs did not end done`);
  const floorAfter = await bench(d, "floorJobs", SIZES.jobs, `bench-floor-d-${stamp}`);
  r.drain_floor = { runs: [floorBefore.ms, floorAfter.ms], ms: (floorBefore.ms + floorAfter.ms) / 2 };
  await dc.close();
  }

  if (want("loads")) {
  log("page load -> first job, against bare loadPyodide (fresh context each)");
  const loads = { first_job: [], first_job_late: [], bare: [] };
  for (let i = 0; i < SIZES.loads; i++) {
    for (const [key, url] of [["bare", "bare-load.html"], ["first_job", "first-job.html"],
                              ["first_job_late", "first-job.html?preload=0"]]) {
      const lc = await browser.newContext();
      const p = await lc.newPage();
      await p.goto(`${base}/bench/${url}`);
      await p.waitForFunction(() => window.benchResult, null, { timeout: 120_000 });
      const res = await p.evaluate(() => window.benchResult);
      if (res.status !== "done") throw new Error(`${url}: ${res.status}`);
      loads[key].push(res.ms);
      await lc.close();
    }
  }
  r.first_job = { ms: median(loads.first_job), runs: loads.first_job };
  r.first_job_late = { ms: median(loads.first_job_late), runs: loads.first_job_late };
  r.bare_load = { ms: median(loads.bare), runs: loads.bare };
  }

  if (want("sw")) {
  log(`service worker: sync event -> last of ${SIZES.sw} jobs sent, against a raw-JS Service Worker`);
  r.sw = await serviceWorkerDrain(browser, base, stamp);
  }

  if (want("tabs")) {
  log(`tabs: memory of ${SIZES.tabs} tabs`);
  const tc = await browser.newContext();
  await sleep(500);
  const pss = [browserPssMB()];
  const tabs = [];
  for (let i = 0; i < SIZES.tabs; i++) {
    tabs.push(await openBenchPage(tc, base, `bench-tabs-${stamp}`));
    await sleep(1000);
    pss.push(browserPssMB());
  }
  const workerPyodides = [];
  for (const t of tabs) workerPyodides.push((await bench(t, "ask", { cmd: "memory" })).error ? 0 : 1);
  r.tabs = { pss_mb: pss, worker_pyodides: workerPyodides };
  await tc.close();
  }
  return r;
}

// ---------------------------------------------------------------- the Service Worker's drain

/** The origin's Service Worker registrations by scope, through `cdp` (ServiceWorker domain). */
async function swRegistrations(cdp) {
  const scopes = new Map();
  cdp.on("ServiceWorker.workerRegistrationUpdated", ({ registrations }) => {
    for (const reg of registrations) if (!reg.isDeleted) scopes.set(reg.scopeURL, reg.registrationId);
  });
  await cdp.send("ServiceWorker.enable");
  await sleep(500);
  return scopes;
}

/** ms from `start()` until the server has answered `n` requests whose path starts with `prefix`. */
async function untilSent(base, prefix, n, start) {
  const t0 = Date.now();
  await start();
  for (;;) {
    const sent = (await (await fetch(`${base}/__control/log`)).json()).filter((e) => e.path.startsWith(prefix));
    if (sent.length >= n) return { ms: Date.now() - t0, sent: sent.length };
    if (Date.now() - t0 > (SMOKE ? 60_000 : 300_000)) throw new Error(`sw: ${sent.length} of ${n} ${prefix} requests after ${SMOKE ? 1 : 5} minute(s)`);
    await sleep(20);
  }
}

/** pyjobq's Service Worker drains `SIZES.sw` jobs filed offline with every page closed, from
 *  the sync event (CDP) to the last request answered; a raw-JS Service Worker the same. Each in
 *  a fresh context (a cold Service Worker: pyjobq's loads Pyodide in its event). */
async function serviceWorkerDrain(browser, base, stamp) {
  const n = SIZES.sw;
  const db = `bench-sw-${stamp}`;
  const ctx = await browser.newContext();
  await ctx.grantPermissions(["background-sync"], { origin: base });
  const page = await ctx.newPage();
  await page.goto(`${base}/tests/harness.html`);
  await page.waitForFunction(() => window.pyReady === true, null, { timeout: 120_000 });
  await py(page, `
import os, sys, json, asyncio
os.makedirs("/home/pyodide/bench_sw", exist_ok=True)
open("/home/pyodide/bench_sw/__init__.py", "w").close()
with open("/home/pyodide/bench_sw/transport.py", "w") as f:
    f.write("""
import json
from pyodide.http import pyfetch

async def send(method, path, body):
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"},
                         body=json.dumps(body))
""")
sys.path.insert(0, "/home/pyodide")
import pyjobq
pyjobq.configure(db_name="${db}", lock_name="${db}-lock", channel_name="${db}",
                 transport="bench_sw.transport:send", service_worker="/pyjobq-sw.mjs")
from pyjobq import queue
"ok"`);
  await page.evaluate(() => navigator.serviceWorker.ready.then(() => "ready"));
  await ctx.setOffline(true);
  await py(page, `
_jobs = [queue.enqueue_fetch("POST", f"/api/echo/${db}-{i}", {"n": i}) for i in range(${n})]
await asyncio.gather(*(j.stored for j in _jobs))
"ok"`);
  await page.close();
  const blank = await ctx.newPage();
  const cdp = await ctx.newCDPSession(blank);
  const scopes = await swRegistrations(cdp);
  // What the Service Worker's drains said, should the requests not come.
  const said = setTimeout(async () => {
    for (const w of ctx.serviceWorkers()) log("service worker drains:", JSON.stringify(await w.evaluate(() => self.pyjobqDrains).catch(String)));
  }, SMOKE ? 30_000 : 120_000);
  const pyjobqSw = await untilSent(base, `/api/echo/${db}-`, n, async () => {
    await ctx.setOffline(false); // Chromium may fire the stored sync itself now; the CDP one is its twin
    await cdp.send("ServiceWorker.dispatchSyncEvent", { origin: base, registrationId: scopes.get(`${base}/`), tag: `pyjobq:${db}`, lastChance: false });
  });
  clearTimeout(said);
  await ctx.close();

  const rc = await browser.newContext();
  await rc.grantPermissions(["background-sync"], { origin: base });
  const rawPage = await rc.newPage();
  await rawPage.goto(`${base}/bench/raw-sw/index.html`);
  await rawPage.waitForFunction(() => window.rawSwReady === true);
  await rawPage.evaluate((count) => window.rawSw.fill(count), n);
  await rawPage.close();
  const rawBlank = await rc.newPage();
  const rawCdp = await rc.newCDPSession(rawBlank);
  const rawScopes = await swRegistrations(rawCdp);
  const raw = await untilSent(base, "/api/echo/raw-sw-", n, () => rawCdp.send("ServiceWorker.dispatchSyncEvent", {
    origin: base, registrationId: rawScopes.get(`${base}/bench/raw-sw/`), tag: "raw", lastChance: false }));
  await rc.close();
  await fetch(`${base}/__control/reset`, { method: "POST" });
  return { ms: pyjobqSw.ms, raw_ms: raw.ms, jobs: n };
}

// ---------------------------------------------------------------- the table

function rows(r) {
  const ratio = (x, y) => x / y;
  const m = r.memory || { jobs: 0, half: 0, before: { page: {}, worker: {} }, mid: { page: {}, worker: {} }, after: { page: {}, worker: {} } };
  const live = m.after.page.live_proxies + m.after.worker.live_proxies;
  const liveMid = m.mid.page.live_proxies + m.mid.worker.live_proxies;
  const pss = r.tabs ? r.tabs.pss_mb : [null];
  const firstTab = pss[0] == null ? NaN : pss[1] - pss[0];
  const extra = pss[0] == null ? NaN : (pss[pss.length - 1] - pss[1]) / (pss.length - 2);
  const fmt = (x, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : "n/a");
  return [
    { key: "one_type", figure: `persistent jobs/s, one type, ${SIZES.jobs} jobs`, value: r.one_type?.jobs_per_s, unit: "jobs/s",
      baseline: "raw-JS floor (3 readwrite tx + 1 worker round trip per job)", base: r.floor?.jobs_per_s,
      ratio: ratio(r.one_type?.jobs_per_s, r.floor?.jobs_per_s), target: [">=", 1.0] },
    { key: "four_types", figure: `persistent jobs/s, four types, ${SIZES.jobs} jobs`, value: r.four_types?.jobs_per_s, unit: "jobs/s",
      baseline: "the same floor", base: r.floor?.jobs_per_s,
      ratio: ratio(r.four_types?.jobs_per_s, r.floor?.jobs_per_s), target: [">=", 2.0] },
    { key: "cpu_four_types", figure: "browser CPU a job, four types (every Chromium thread)", value: r.four_types?.cpu_ms_per_job, unit: "ms",
      baseline: "the floor's, a job", base: r.floor?.cpu_ms_per_job,
      // /proc counts CPU in 10 ms ticks: a floor that reads none (smoke sizes) counts one.
      ratio: ratio(r.four_types?.cpu_ms_per_job, Math.max(r.floor?.cpu_ms_per_job, 10 / SIZES.jobs)), target: null,
      note: r.floor?.cpu_ms_per_job && `on ${os.cpus().length} cores, four types cannot pass ` +
        `${fmt((os.cpus().length * 1000) / r.four_types?.cpu_ms_per_job)} jobs/s ` +
        `(${fmt((os.cpus().length * 1000) / r.four_types?.cpu_ms_per_job / r.floor.jobs_per_s, 2)}× the floor) at this CPU a job; ` +
        `one type spends ${fmt(r.one_type?.cpu_ms_per_job, 2)} ms a job` },
    { key: "burst", figure: `enqueue_fetch x${SIZES.burst} burst, until stored`, value: r.burst?.ms, unit: "ms",
      baseline: `raw-JS put of ${SIZES.burst} records in one tx`, base: r.raw_put?.ms,
      ratio: ratio(r.burst?.ms, r.raw_put?.ms), target: ["<=", 1.5] },
    { key: "handshake_p50", figure: "run -> run_started handshake, p50", value: r.handshake?.p50, unit: "ms",
      baseline: "raw-JS worker round trip, p50", base: r.round_trip?.p50,
      ratio: ratio(r.handshake?.p50, Math.max(r.round_trip?.p50, CLOCK_MS)), target: ["<=", 3] },
    { key: "handshake_p99", figure: "run -> run_started handshake, p99", value: r.handshake?.p99, unit: "ms",
      baseline: "raw-JS worker round trip, p99", base: r.round_trip?.p99,
      ratio: ratio(r.handshake?.p99, Math.max(r.round_trip?.p99, CLOCK_MS)), target: null },
    { key: "first_job", figure: "page load -> first persistent job done, plain page with the preload line", value: r.first_job?.ms, unit: "ms",
      baseline: "bare loadPyodide, page + worker in parallel", base: r.bare_load?.ms,
      ratio: ratio(r.first_job?.ms, r.bare_load?.ms), target: ["<=", 1.2] },
    { key: "first_job_late", figure: "page load -> first persistent job done, no preload line (PyScript, notebooks)", value: r.first_job_late?.ms, unit: "ms",
      baseline: "bare loadPyodide, page + worker in parallel", base: r.bare_load?.ms,
      ratio: ratio(r.first_job_late?.ms, r.bare_load?.ms), target: null },
    { key: "sw_drain", figure: `sync event -> last of ${r.sw?.jobs} jobs sent by pyjobq's Service Worker (cold: it loads Pyodide)`, value: r.sw?.ms, unit: "ms",
      baseline: "a raw-JS Service Worker sending the same requests", base: r.sw?.raw_ms,
      ratio: ratio(r.sw?.ms, r.sw?.raw_ms), target: null },
    { key: "volatile", figure: `volatile no-op jobs/s, ${SIZES.volatile} jobs`, value: r.volatile?.jobs_per_s, unit: "jobs/s",
      baseline: "bare asyncio tasks, one after another", base: r.bare_tasks?.jobs_per_s,
      ratio: ratio(r.volatile?.jobs_per_s, r.bare_tasks?.jobs_per_s), target: [">=", 0.5] },
    { key: "pass", figure: `one pass (enqueue -> done) among ${r.pass_large?.records} records`, value: r.pass_large?.ms, unit: "ms",
      baseline: `the same among ${r.pass_small?.records} records`, base: r.pass_small?.ms,
      ratio: ratio(r.pass_large?.ms, r.pass_small?.ms), target: ["<=", 1.2] },
    { key: "drain", figure: `drain after reconnect: ${SIZES.jobs} jobs (four types), online -> all done`, value: r.drain?.ms, unit: "ms",
      baseline: `raw-JS floor, time for ${SIZES.jobs} jobs`, base: r.drain_floor?.ms,
      ratio: ratio(r.drain?.ms, r.drain_floor?.ms), target: ["<=", 1.0],
      note: r.drain && `the spell: ${(r.drain_spell.spell_ms / 1000).toFixed(0)} s until every job had failed offline; ` +
        `${r.drain.tries_offline} tries failed offline (${r.drain.tries_offline_after_online} published after the online event); ` +
        `most attempts counted on one job: ${r.drain.max_attempts}` },
    { key: "wasm_heap_page", figure: `page wasm heap after ${m.jobs} jobs`, value: m.after.page?.wasm_heap / 2 ** 20, unit: "MiB",
      baseline: "before", base: m.before.page.wasm_heap / 2 ** 20,
      ratio: ratio(m.after.page?.wasm_heap, m.before.page.wasm_heap), target: ["<=", 1.0] },
    { key: "wasm_heap_worker", figure: `worker wasm heap after ${m.jobs} jobs`, value: m.after.worker.wasm_heap / 2 ** 20, unit: "MiB",
      baseline: "before", base: m.before.worker.wasm_heap / 2 ** 20,
      ratio: ratio(m.after.worker.wasm_heap, m.before.worker.wasm_heap), target: ["<=", 1.0] },
    { key: "py_objects", figure: `live Python objects (page + worker) after ${m.jobs} jobs`,
      value: m.after.page.py_objects + m.after.worker.py_objects, unit: "objects",
      baseline: "before", base: m.before.page.py_objects + m.before.worker.py_objects,
      ratio: ratio(m.after.page.py_objects + m.after.worker.py_objects, m.before.page.py_objects + m.before.worker.py_objects),
      target: null },
    { key: "proxies", figure: `PyProxies made during ${m.jobs} jobs, still live (page + worker)`, value: live, unit: "proxies",
      baseline: `live after the first ${m.half} (ratio: growth per job since)`, base: liveMid,
      ratio: (live - liveMid) / (m.jobs - m.half), target: ["<=", 0],
      note: `page ${m.after.page.live_proxies}, worker ${m.after.worker.live_proxies}; halfway: page ${m.mid.page.live_proxies}, worker ${m.mid.worker.live_proxies}` },
    { key: "tab_memory", figure: `memory of each extra tab (${pss.length - 2} extra)`, value: extra, unit: "MB PSS",
      baseline: "the first tab", base: firstTab, ratio: ratio(extra, firstTab), target: ["<=", 0.6],
      note: r.tabs && `a waiting tab's worker loaded Pyodide: ${r.tabs.worker_pyodides.slice(1).every(Boolean) ? "yes" : "no"}` },
  ].filter((row) => want(PART_OF[row.key])).map((row) => {
    const [op, t] = row.target || [];
    row.met = !row.target ? null : op === ">=" ? row.ratio >= t : row.ratio <= t + 1e-9;
    row.value_s = fmt(row.value, row.unit === "ms" && row.value < 10 ? 3 : row.unit === "MiB" ? 1 : 0);
    row.base_s = fmt(row.base, row.unit === "ms" && row.base < 10 ? 3 : row.unit === "MiB" ? 1 : 0);
    return row;
  });
}

/** Which --only part measures each row. */
const PART_OF = {
  one_type: "page-a", four_types: "page-a", cpu_four_types: "page-a", handshake_p50: "page-a", handshake_p99: "page-a", volatile: "page-a",
  wasm_heap_page: "page-a", wasm_heap_worker: "page-a", py_objects: "page-a", proxies: "page-a",
  burst: "burst", pass: "pass", drain: "drain", first_job: "loads", first_job_late: "loads", sw_drain: "sw", tab_memory: "tabs",
};

function table(rs) {
  const head = ["figure", "value", "baseline", "base", "ratio", "target", "met"];
  const lines = rs.map((x) => [
    x.figure, `${x.value_s} ${x.unit}`, x.baseline, `${x.base_s} ${x.unit}`,
    Number.isFinite(x.ratio) ? x.ratio.toFixed(x.key === "proxies" ? 4 : 2) : "n/a",
    !x.target ? "-" : `${x.target[0]} ${x.target[1]}x`,
    x.met === null ? "-" : x.met ? "yes" : "NO",
  ]);
  const w = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const row = (cells) => "| " + cells.map((c, i) => c.padEnd(w[i])).join(" | ") + " |";
  return [row(head), "|" + w.map((n) => "-".repeat(n + 2)).join("|") + "|", ...lines.map(row)].join("\n");
}

function chartSvg(rs, meta) {
  const W = 900, rowH = 34, left = 330, right = 60, top = 50;
  const H = top + rs.length * rowH + 40;
  const lg = (x) => Math.log10(Math.max(1e-3, Math.min(1e3, x)));
  const lo = -2, hi = 2; // 0.01x .. 100x
  const X = (x) => left + ((lg(x) - lo) / (hi - lo)) * (W - left - right);
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;");
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`;
  svg += `<rect width="100%" height="100%" fill="white"/>`;
  svg += `<text x="10" y="20" font-size="15" font-weight="bold">pyjobq against its baselines (ratio, log scale)${meta.smoke ? " — SMOKE sizes" : ""}</text>`;
  svg += `<text x="10" y="38" fill="#555">${esc(meta.machine)}</text>`;
  for (const t of [0.01, 0.1, 0.3, 1, 3, 10, 100]) {
    svg += `<line x1="${X(t)}" x2="${X(t)}" y1="${top}" y2="${H - 30}" stroke="#ddd"/>`;
    svg += `<text x="${X(t)}" y="${H - 14}" text-anchor="middle" fill="#555">${t}x</text>`;
  }
  rs.forEach((x, i) => {
    const y = top + i * rowH;
    const r = x.key === "proxies" ? 1 + x.ratio : x.ratio; // proxies: 1 + leaked per job
    const color = x.met === null ? "#888" : x.met ? "#2a8a3a" : "#c0392b";
    svg += `<text x="${left - 8}" y="${y + 20}" text-anchor="end">${esc(x.figure.slice(0, 52))}</text>`;
    svg += `<rect x="${X(1)}" y="${y + 8}" width="${Math.max(1, Math.abs(X(r) - X(1)))}" height="18" fill="${color}" transform="${r < 1 ? `translate(${X(r) - X(1)},0)` : ""}"/>`;
    if (x.target) {
      const tx = X(x.key === "proxies" ? 1 : x.target[1]);
      svg += `<line x1="${tx}" x2="${tx}" y1="${y + 4}" y2="${y + 30}" stroke="black" stroke-width="2" stroke-dasharray="3,2"/>`;
    }
    svg += `<text x="${Math.min(W - 40, Math.max(X(r), X(1)) + 4)}" y="${y + 21}" fill="#222">${Number.isFinite(x.ratio) ? x.ratio.toFixed(2) : "n/a"}</text>`;
  });
  return svg + "</svg>";
}

// ---------------------------------------------------------------- main

const PROFILE = `
import cProfile, io, pstats
def _pyjobq_profile(start):
    global _profiler
    if start:
        _profiler = cProfile.Profile()
        _profiler.enable()
        return "on"
    _profiler.disable()
    out = io.StringIO()
    pstats.Stats(_profiler, stream=out).sort_stats("${process.env.BENCH_PROFILE_SORT || "tottime"}").print_stats(${Number(process.env.BENCH_PROFILE_ROWS) || 35})
    callers = ${JSON.stringify(process.env.BENCH_PROFILE_CALLERS || "")}
    if callers:
        pstats.Stats(_profiler, stream=out).print_callers(callers)
    return out.getvalue()
`;

/** Where the time of a serial lane goes, by Python function, on the page and in the worker. */
async function profile(browser, base, n) {
  const ctx = await browser.newContext();
  const a = await openBenchPage(ctx, base, `profile-${Date.now().toString(36)}`);
  await py(a, PROFILE + '"ok"');
  await bench(a, "ask", { cmd: "python", code: PROFILE + "_pyjobq_profile(True)" });
  await py(a, "_pyjobq_profile(True)");
  // BENCH_PROFILE_RUN: what to profile instead, e.g. "await burst(N)" (N: the count given).
  const out = await py(a, (process.env.BENCH_PROFILE_RUN || "await persistent(N, 1)").replaceAll("N", String(n)));
  const page = await py(a, "_pyjobq_profile(False)");
  const worker = (await bench(a, "ask", { cmd: "python", code: "_pyjobq_profile(False)" })).value;
  console.log(process.env.BENCH_PROFILE_RUN ? `${process.env.BENCH_PROFILE_RUN} (N=${n}) under cProfile: ${JSON.stringify(out)}\n`
    : `${n} persistent jobs, one type, under cProfile: ${out.jobs_per_s.toFixed(0)} jobs/s\n`);
  console.log("== the page ==\n" + page + "\n== the scheduler worker ==\n" + worker);
  await ctx.close();
}

/** Where the scheduler worker's thread spends a job, by V8's sampling profiler attached to the
 *  worker over CDP: self time by kind of code (wasm, JavaScript, the browser's own) and by function. */
async function cpuProfile(browser, base, n) {
  const ctx = await browser.newContext();
  const a = await openBenchPage(ctx, base, `cpuprofile-${Date.now().toString(36)}`);
  await py(a, "await persistent(50, 1)"); // warm: the worker's lanes and caches exist
  const cdp = await ctx.newCDPSession(a);
  // The page's dedicated worker, reached through an auto-attach of this session (not flattened:
  // its messages travel inside Target.sendMessageToTarget / receivedMessageFromTarget).
  const workers = [];
  cdp.on("Target.attachedToTarget", (e) => { if (e.targetInfo.type === "worker") workers.push(e.sessionId); });
  let next = 1;
  const pending = new Map();
  cdp.on("Target.receivedMessageFromTarget", (e) => {
    const m = JSON.parse(e.message);
    if (m.id && pending.has(m.id)) { pending.get(m.id)(m); pending.delete(m.id); }
  });
  const inWorker = (sessionId, method, params = {}) => new Promise((resolve, reject) => {
    const id = next++;
    pending.set(id, (m) => (m.error ? reject(new Error(`${method}: ${m.error.message}`)) : resolve(m.result)));
    cdp.send("Target.sendMessageToTarget", { sessionId, message: JSON.stringify({ id, method, params }) }).catch(reject);
  });
  await cdp.send("Target.setAutoAttach", { autoAttach: true, waitForDebuggerOnStart: false, flatten: false });
  for (let i = 0; i < 100 && !workers.length; i++) await sleep(50);
  if (!workers.length) throw new Error("--cpuprofile: no worker attached");
  // The scheduler worker: the one whose Python answers the bench's ask (the only worker of the page).
  const w = workers[0];
  await inWorker(w, "Profiler.enable");
  await inWorker(w, "Profiler.setSamplingInterval", { interval: 100 });
  await cdp.send("Profiler.enable");
  await cdp.send("Profiler.setSamplingInterval", { interval: 100 });
  await inWorker(w, "Profiler.start");
  await cdp.send("Profiler.start");
  const out = await py(a, `await in_batches(${n}, 100, 1)`);
  const worker = (await inWorker(w, "Profiler.stop")).profile;
  const page = (await cdp.send("Profiler.stop")).profile;
  log(JSON.stringify(out));
  if (process.env.BENCH_CPUPROFILE) {
    fs.writeFileSync(`${process.env.BENCH_CPUPROFILE}.worker.cpuprofile`, JSON.stringify(worker));
    fs.writeFileSync(`${process.env.BENCH_CPUPROFILE}.page.cpuprofile`, JSON.stringify(page));
  }
  await ctx.close();
  console.log(`${n} persistent jobs, one type, in batches of 100; each thread sampled every 0.1 ms`);
  summarise("the scheduler worker's thread", worker, n);
  summarise("the page's main thread", page, n);
}

/** A V8 CPU profile's self time, ms a job: by kind of code, and its top functions. */
function summarise(title, prof, jobs) {
  const byId = new Map(prof.nodes.map((node) => [node.id, node]));
  const self = new Map();
  const deltas = prof.timeDeltas;
  for (let i = 0; i < prof.samples.length; i++) self.set(prof.samples[i], (self.get(prof.samples[i]) || 0) + (deltas[i + 1] ?? 0) / 1000);
  const kindOf = (cf) => {
    if (cf.url.startsWith("wasm://") || /^wasm-function/.test(cf.functionName)) return "wasm: the interpreter, Python's code";
    if (/pyodide(\.asm)?\.m?js/.test(cf.url)) return "JavaScript: Pyodide's (conversions, proxies, calls across)";
    if (cf.url) return "JavaScript: pyjobq's and the page's";
    if (["(idle)", "(garbage collector)", "(program)"].includes(cf.functionName)) return cf.functionName;
    if (/^(js-to-wasm|wasm-to-js)/.test(cf.functionName)) return "calls between wasm and JavaScript";
    if (/^(put|get|getAll|add|delete|transaction|objectStore|openCursor|continue|index|count|request\.onsuccess|tx\.oncomplete|get result)$/.test(cf.functionName)) return "browser: IndexedDB calls (a value's clone included)";
    if (/^(request|query|release|get locks)$/.test(cf.functionName)) return "browser: Web Locks calls";
    if (cf.functionName === "postMessage") return "browser: postMessage (the clone included)";
    return "browser: other";
  };
  const kinds = new Map(), fns = new Map();
  for (const [id, ms] of self) {
    const cf = byId.get(id).callFrame;
    const k = kindOf(cf);
    kinds.set(k, (kinds.get(k) || 0) + ms);
    const f = `${cf.functionName || "(anonymous)"}  ${cf.url ? path.basename(cf.url).split("#")[0] + ":" + cf.lineNumber : ""}`;
    fns.set(f, (fns.get(f) || 0) + ms);
  }
  const total = [...self.values()].reduce((x, y) => x + y, 0);
  const idle = kinds.get("(idle)") || 0;
  console.log(`\n== ${title}: ${((total - idle) / jobs).toFixed(2)} ms busy a job (${(100 * (total - idle) / total).toFixed(0)} % of ${total.toFixed(0)} ms) ==`);
  for (const [k, ms] of [...kinds].sort((x, y) => y[1] - x[1])) console.log(`${(ms / jobs).toFixed(3).padStart(8)}  ${(100 * ms / total).toFixed(1).padStart(5)} %  ${k}`);
  console.log(`-- its top functions by self time (ms a job) --`);
  for (const [f, ms] of [...fns].sort((x, y) => y[1] - x[1]).slice(0, Number(process.env.BENCH_PROFILE_ROWS) || 25)) {
    console.log(`${(ms / jobs).toFixed(4).padStart(8)}  ${(100 * ms / total).toFixed(1).padStart(5)} %  ${f}`);
  }
}

// Every pyjobq message each side posts and handles, stamped on one clock (timeOrigin + now).
const TRACE = `
import js, json
from pyjobq.browser import ports as _trace_ports
_trace = []
def _trace_on():
    deliver = _trace_ports._Listeners.deliver
    class _Json:
        loads = staticmethod(json.loads)
        @staticmethod
        def dumps(message):
            # Bound sends are held by the engine: the module's json is where every post passes.
            _trace.append((js.performance.timeOrigin + js.performance.now(), "out", message.get("type"), message.get("job_id") or message.get("id")))
            return json.dumps(message)
    def traced_deliver(self, data):
        t = js.performance.timeOrigin + js.performance.now()
        deliver(self, data)
        m = _trace_ports.decode(data) or {}
        _trace.append((t, "in", m.get("type"), m.get("job_id") or m.get("id"), js.performance.timeOrigin + js.performance.now()))
    _trace_ports.json, _trace_ports._Listeners.deliver = _Json, traced_deliver
    try:
        import asyncio
        from pyjobq.browser import drain as _trace_drain
        loop = asyncio.get_event_loop()
        _trace.append((0, "run_ready", str(getattr(loop, "_pyjobq_run_ready", None) is not None), None))
        # Each run of ready callbacks, begun and ended: how long the worker is busy in Python.
        batching = getattr(loop, "_pyjobq_run_ready", None)
        if batching is not None:
            cls = type(batching.__self__)
            drain_fn = cls.drain
            def traced_drain(self):
                if self.running:
                    return drain_fn(self)
                t0 = js.performance.timeOrigin + js.performance.now()
                try:
                    return drain_fn(self)
                finally:
                    _trace.append((t0, "drain", "ms", js.performance.timeOrigin + js.performance.now()))
            cls.drain = traced_drain
    except Exception as exc:
        _trace.append((0, "run_ready", repr(exc), None))
    def marked(cls, name):
        fn = getattr(cls, name)
        async def wrapper(*a, **k):
            _trace.append((js.performance.timeOrigin + js.performance.now(), "mark", f"{cls.__name__}.{name} in", None))
            try:
                return await fn(*a, **k)
            finally:
                _trace.append((js.performance.timeOrigin + js.performance.now(), "mark", f"{cls.__name__}.{name} out", None))
        setattr(cls, name, wrapper)
    try:
        from pyjobq.engine.settle import Settler
        from pyjobq.engine.passes import Pass
        from pyjobq.engine.runlocks import RunLocks
        take = RunLocks.take
        async def peek_take(self, entries):
            for e in entries:
                asked = self._prefetched.get(e.type) or {}
                if isinstance(asked, tuple):  # one asked ahead per type (before depth 2)
                    asked = {asked[0]: asked[1]}
                state = "none" if not asked else "other" if e.id not in asked else "done" if asked[e.id].done() else "pending"
                _trace.append((js.performance.timeOrigin + js.performance.now(), "prefetch", state, None))
            return await take(self, entries)
        RunLocks.take = peek_take
        marked(Settler, "settle"); marked(Pass, "follow_on"); marked(Pass, "group_commit"); marked(RunLocks, "take")
        # How long each of the steps that follow a run's post holds the worker.
        from pyjobq.engine.publisher import Publisher
        from pyjobq.engine.handoff import Handoff
        def timed(cls, name):
            fn = getattr(cls, name)
            def wrapper(*a, **k):
                t0 = js.performance.timeOrigin + js.performance.now()
                try:
                    return fn(*a, **k)
                finally:
                    _trace.append((t0, "held", f"{cls.__name__}.{name}", js.performance.timeOrigin + js.performance.now() - t0))
            setattr(cls, name, wrapper)
        timed(Publisher, "flush"); timed(Publisher, "records"); timed(Pass, "_prefetch"); timed(Handoff, "hand_off")
        ask = RunLocks._ask
        def timed_ask(self, entry):
            t0 = js.performance.timeOrigin + js.performance.now()
            answer = ask(self, entry)
            answer.add_done_callback(lambda _a: _trace.append(
                (t0, "take_one", "ms", js.performance.timeOrigin + js.performance.now() - t0)))
            return answer
        RunLocks._ask = timed_ask
    except Exception as exc:
        _trace.append((0, "marks", repr(exc), None))
    try:
        from pyjobq.browser import idb as _trace_idb
    except ImportError:
        return "on"
    init, finish = _trace_idb._Transaction.__init__, _trace_idb._Transaction._finish
    def traced_init(self, db, mode, what, *scope):
        _trace.append((js.performance.timeOrigin + js.performance.now(), "tx", what, None))
        init(self, db, mode, what, *scope)
    def traced_finish(self, error):
        if not self.future.done():
            _trace.append((js.performance.timeOrigin + js.performance.now(), "tx-end", self.what, None))
        finish(self, error)
    then = _trace_idb._Transaction.then
    def traced_then(self, request, fn):
        def timed(result):
            _trace.append((js.performance.timeOrigin + js.performance.now(), "cb", self.what, None))
            fn(result)
            _trace.append((js.performance.timeOrigin + js.performance.now(), "cb-end", self.what, None))
        then(self, request, timed)
    _trace_idb._Transaction.__init__, _trace_idb._Transaction._finish = traced_init, traced_finish
    _trace_idb._Transaction.then = traced_then
    one_call = getattr(_trace_idb.IndexedDBStore, "_in_one_call", None)
    if one_call is not None:  # the settle-and-claim made in one call into JavaScript
        async def traced_one_call(self, what, keys, values, decide=None):
            now = lambda: js.performance.timeOrigin + js.performance.now()
            def timed(read):
                _trace.append((now(), "cb", what, None))
                try:
                    return decide(read)
                finally:
                    _trace.append((now(), "cb-end", what, None))
            _trace.append((now(), "tx", what, None))
            try:
                return await one_call(self, what, keys, values, None if decide is None else timed)
            finally:
                _trace.append((now(), "tx-end", what, None))
        _trace_idb.IndexedDBStore._in_one_call = traced_one_call
    return "on"
`;

/** Per job of a serial lane: how long each side holds it, and how long each message travels. */
async function trace(browser, base, n) {
  const ctx = await browser.newContext();
  const a = await openBenchPage(ctx, base, `trace-${Date.now().toString(36)}`);
  await py(a, TRACE + "_trace_on()");
  await bench(a, "ask", { cmd: "python", code: TRACE + "_trace_on()" });
  const out = await py(a, `await persistent(${n}, 1)`);
  if (out.not_done) console.log("a job not done:", await py(a, `repr(await queue.enqueue_fetch("POST", "/bench", None, type="probe").done)`));
  // The settle's transaction alone, in the idle worker: two records read and written, 200 times.
  const alone = await bench(a, "ask", { cmd: "python_async", code: fs.readFileSync(process.env.BENCH_PROBE || "/dev/null", "utf8") || "'no probe'" });
  console.log("the settle's transaction alone, idle worker:", JSON.stringify(alone.value ?? alone));
  const asList = (v) => (typeof v === "string" ? JSON.parse(v) : v);
  const page = asList(await py(a, "json.dumps(_trace)"));
  const worker = asList((await bench(a, "ask", { cmd: "python", code: "json.dumps(_trace)" })).value);
  await ctx.close();
  const first = (xs, dir, type) => { const m = new Map(); for (const e of xs) if (e[1] === dir && e[2] === type && e[3] && !m.has(e[3])) m.set(e[3], e); return m; };
  const wRunOut = first(worker, "out", "run"), pRunIn = first(page, "in", "run");
  const pResOut = first(page, "out", "run_result"), wResIn = first(worker, "in", "run_result");
  const ids = [...wRunOut.keys()].filter((id) => pRunIn.has(id) && pResOut.has(id) && wResIn.has(id));
  const seg = { "run: worker post -> page handler": [], "page: run handled -> run_result posted": [],
    "run_result: page post -> worker handler": [], "worker: run_result handled -> next run posted": [] };
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    seg["run: worker post -> page handler"].push(pRunIn.get(id)[0] - wRunOut.get(id)[0]);
    seg["page: run handled -> run_result posted"].push(pResOut.get(id)[0] - pRunIn.get(id)[0]);
    seg["run_result: page post -> worker handler"].push(wResIn.get(id)[0] - pResOut.get(id)[0]);
    if (i + 1 < ids.length) seg["worker: run_result handled -> next run posted"].push(wRunOut.get(ids[i + 1])[0] - wResIn.get(id)[0]);
  }
  // The worker's Python, run by run of ready callbacks: what follows each run's post in its own
  // run (the news, the next run lock asked), and the whole per job.
  const drains = worker.filter((e) => e[1] === "drain");
  if (drains.length) {
    const tails = [];
    for (const [t] of wRunOut.values()) {
      const d = drains.find((e) => e[0] <= t && t <= e[3]);
      if (d) tails.push(d[3] - t);
    }
    const t0 = wRunOut.get(ids[0])?.[0], t1 = wRunOut.get(ids[ids.length - 1])?.[0];
    const busy = drains.filter((e) => e[0] >= t0 && e[3] <= t1).reduce((a, e) => a + e[3] - e[0], 0);
    console.log(`worker Python after posting run, in the same run: median ${median(tails).toFixed(2)} ms; `
      + `worker Python per job (runs of ready callbacks): ${(busy / Math.max(1, ids.length - 1)).toFixed(2)} ms`);
  }
  const held = {};
  for (const e of worker) if (e[1] === "held") (held[e[2]] ||= []).push(e[3]);
  for (const [name, xs] of Object.entries(held)) console.log(`  ${name} holds the worker: median ${median(xs).toFixed(3)} ms over ${xs.length}`);
  const takes = worker.filter((e) => e[1] === "take_one").map((e) => e[3]);
  if (takes.length) console.log(`run lock asked -> answered: median ${median(takes).toFixed(2)} ms over ${takes.length}`);
  const count = (xs) => { const c = {}; for (const e of xs) { const k = `${e[1]} ${e[2]}`; c[k] = (c[k] || 0) + 1; } return c; };
  console.log("page messages:", JSON.stringify(count(page)));
  console.log("worker messages:", JSON.stringify(count(worker)));
  // The worker's turnaround, split at its transaction: before it begins, inside it, after it ends.
  const split = { "worker: run_result handled -> tx begun": [], "worker: tx begun -> tx complete": [], "worker: tx complete -> next run posted": [] };
  for (let i = 0; i + 1 < ids.length; i++) {
    const t0 = wResIn.get(ids[i])[0], t3 = wRunOut.get(ids[i + 1])[0];
    const begun = worker.find((e) => e[1] === "tx" && e[0] >= t0 && e[0] <= t3);
    const ended = worker.find((e) => e[1] === "tx-end" && begun && e[0] >= begun[0] && e[0] <= t3);
    if (!begun || !ended) continue;
    split["worker: run_result handled -> tx begun"].push(begun[0] - t0);
    split["worker: tx begun -> tx complete"].push(ended[0] - begun[0]);
    split["worker: tx complete -> next run posted"].push(t3 - ended[0]);
    const cbs = worker.filter((e) => (e[1] === "cb" || e[1] === "cb-end") && e[0] >= begun[0] && e[0] <= ended[0]);
    // How much of the transaction's wait the worker spent in Python of its own (runs of ready
    // callbacks other than the transaction's): a busy worker delays the transaction's events.
    const busyIn = (a, b) => drains.reduce((s, d) => s + Math.max(0, Math.min(b, d[3]) - Math.max(a, d[0])), 0);
    if (drains.length) (split["tx: worker busy in Python meanwhile"] ||= []).push(busyIn(begun[0], ended[0]));
    if (drains.length && cbs.length) (split["tx: worker busy before first callback"] ||= []).push(busyIn(begun[0], cbs[0][0]));
    if (cbs.length >= 2) {
      (split["tx: begun -> first get's callback"] ||= []).push(cbs[0][0] - begun[0]);
      (split["tx: callbacks, first begins -> last ends"] ||= []).push(cbs[cbs.length - 1][0] - cbs[0][0]);
      (split["tx: last callback ends -> complete"] ||= []).push(ended[0] - cbs[cbs.length - 1][0]);
    }
  }
  Object.assign(seg, split);
  // On the page, what comes just before each run: the news of the settle and claim.
  for (const [id, runIn] of pRunIn) {
    const before = page.filter((e) => e[1] === "in" && e[2] === "job-update" && e[0] <= runIn[0]).at(-1);
    if (!before || runIn[0] - before[0] > 20) continue;
    (seg["page: job-update handled (just before run)"] ||= []).push(before[4] - before[0]);
    (seg["page: that job-update's end -> run handled"] ||= []).push(runIn[0] - before[4]);
  }
  // Each mark's first time after a run_result was handled, and before the next run was posted.
  for (let i = 0; i + 1 < ids.length; i++) {
    const t0 = wResIn.get(ids[i])[0], t3 = wRunOut.get(ids[i + 1])[0];
    const seen = new Set();
    for (const e of worker) {
      if (e[1] !== "mark" || e[0] < t0 || e[0] > t3 || seen.has(e[2])) continue;
      seen.add(e[2]);
      (seg[`  after run_result: ${e[2]}`] ||= []).push(e[0] - t0);
    }
  }
  console.log(`${n} persistent jobs, one type, traced (${out.not_done} not done): ${out.jobs_per_s.toFixed(0)} jobs/s (${(1000 / out.jobs_per_s).toFixed(2)} ms a job)`);
  for (const [name, xs] of Object.entries(seg)) {
    const s = [...xs].sort((x, y) => x - y);
    console.log(`  ${name.padEnd(48)} median ${median(xs).toFixed(2)} ms, p90 ${s[Math.floor(s.length * 0.9)]?.toFixed(2)} ms, mean ${(xs.reduce((x, y) => x + y, 0) / xs.length).toFixed(2)} ms`);
  }
}

async function main() {
  if (!fs.existsSync(path.join(SITE, "bench", "index.html"))) throw new Error("build/site/bench is missing: run `make build`");
  const { base, proc } = await startServer();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium", headless: true, args: CHROMIUM_ARGS,
  });
  try {
    const info = JSON.parse(fs.readFileSync(path.join(SITE, "build-info.json"), "utf8"));
    const machine = `${os.cpus().length} cores (${os.cpus()[0]?.model?.trim() || "?"}), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB RAM, ` +
      `Chromium ${browser.version()}, Pyodide ${info.pyodide}, load avg ${os.loadavg()[0].toFixed(1)}`;
    if (argv.includes("--run")) {
      // One of the bench page's Python calls, as is: e.g. --run "await burst(10000)".
      const ctx = await browser.newContext();
      const a = await openBenchPage(ctx, base, `run-${Date.now().toString(36)}`);
      // With the CPU time every Chromium process spent in the call: steadier than the wall
      // clock on a shared machine, for comparing two builds (BENCH_SITE).
      const cpu0 = browserCpuSeconds();
      const out = await py(a, argv[argv.indexOf("--run") + 1]);
      const cpu = cpu0 === null ? null : browserCpuSeconds() - cpu0;
      console.log(JSON.stringify(typeof out === "object" && out !== null ? { ...out, browser_cpu_s: cpu } : out));
      return await ctx.close();
    }
    if (argv.includes("--trace")) {
      const n = Number(argv[argv.indexOf("--trace") + 1]) || 300;
      return await trace(browser, base, n);
    }
    if (argv.includes("--cpuprofile")) {
      const n = Number(argv[argv.indexOf("--cpuprofile") + 1]) || 1000;
      return await cpuProfile(browser, base, n);
    }
    if (argv.includes("--profile")) {
      const n = Number(argv[argv.indexOf("--profile") + 1]) || 300;
      return await profile(browser, base, n);
    }
    log(`${SMOKE ? "SMOKE sizes" : "full sizes"}; ${machine}`);
    const t0 = Date.now();
    const raw = await measure(browser, base, Date.now().toString(36));
    const rs = rows(raw);
    const meta = { smoke: SMOKE, sizes: SIZES, machine, load_after: os.loadavg()[0], seconds: (Date.now() - t0) / 1000, date: new Date().toISOString() };
    fs.mkdirSync(OUT, { recursive: true });
    fs.writeFileSync(path.join(OUT, "bench.json"), JSON.stringify({ meta, rows: rs, raw }, null, 1) + "\n");
    const page = await browser.newPage({ viewport: { width: 900, height: 600 } });
    await page.setContent(`<body style="margin:0">${chartSvg(rs, meta)}</body>`);
    await page.locator("svg").screenshot({ path: path.join(OUT, "bench.png") });
    await page.close();
    console.log(`pyjobq bench${SMOKE ? " (SMOKE sizes: not figures)" : ""} — ${machine}`);
    console.log(table(rs));
    for (const x of rs) if (x.note) console.log(`  ${x.key}: ${x.note}`);
    console.log(`wrote ${path.relative(process.cwd(), path.join(OUT, "bench.json"))} and bench.png in ${meta.seconds.toFixed(0)} s`);
  } finally {
    await browser.close();
    proc.kill();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
