// @ts-check
// The chaos run: three tabs, persistent jobs of three types, a server that answers at random
// (200, 500, 429, slowly, or expires the token so requests get 401 until the transport
// refreshes it), while the processing tab's renderer is crashed (CDP Page.crash), tabs are
// closed and reopened, reloaded, and the context goes offline and back.
//
// Afterwards, from the server's log (every /api/chaos/<key> request with its start and end,
// and whether the client went away first) and from the store:
//   every job is terminal; none is lost; no job ran in two places at once; no job was tried
//   more often than its max_attempts allows (a try = a request that reached the server and was
//   not a 401); every failed record keeps its _params; every done job has a 200 in the log.
// The figures are printed; any violation fails the test.
//
// `make test` runs 60 jobs and 2 crashes. CHAOS_FULL=1 runs 300 jobs and 5 crashes.
// CHAOS_SEED=n picks the server's answers (default 1).
const { test, expect } = require("@playwright/test");
const { openHarness, py, refreshingTransport, resetServer, serverLog, crashTab, queueReady, harnessReady } = require("./helpers");

const FULL = !!process.env.CHAOS_FULL;
const N = FULL ? 300 : 60;
const CRASHES = FULL ? 5 : 2;
const SEED = Number(process.env.CHAOS_SEED || 1);
const TYPES = { alpha: 3, beta: 4, gamma: 5 }; // type -> max_attempts
const TYPE_NAMES = Object.keys(TYPES);

test.setTimeout(FULL ? 900_000 : 300_000);

// The transport reads the token on every try and refreshes it on a 401, then tries again:
// a 401 -> refresh -> 200 flow never reaches the queue (which would wait 60 s on a 401).
const SETUP = `
import json, asyncio, pyjobq
import js
${refreshingTransport({ tries: 8, onSend: "js.window.lastRun = js.Date.now()" })}
pyjobq.configure(transport=send)
from pyjobq import queue
"ok"
`;

async function openTab(context, baseURL, pages) {
  const page = await openHarness(context, { setup: SETUP });
  pages.push(page);
  return page;
}

/** Reload the tab: the harness again, the queue configured and ready. */
async function boot(page) {
  await page.goto("/tests/harness.html");
  await harnessReady(page);
  await py(page, SETUP);
  await queueReady(page);
}

/** File `count` jobs from `page`, returning [[key, id, type]] once every one is stored. */
async function enqueueWave(page, from, count) {
  return py(page, `
jobs = []
for i in range(${from}, ${from + count}):
    job_type = ${JSON.stringify(TYPE_NAMES)}[i % 3]
    attempts = ${JSON.stringify(TYPES)}[job_type]
    doomed = "?fail=always" if i % 10 == 7 else ""  # every tenth job fails every try
    job = queue.enqueue_fetch("POST", f"/api/chaos/c{i}{doomed}", {"i": i, "note": "x" * (i % 50)},
                              type=job_type, max_attempts=attempts, label=f"chaos {i}")
    jobs.append((f"c{i}", job.id, job_type, job))
await asyncio.wait_for(asyncio.gather(*(j[3].stored for j in jobs)), 60)
json.dumps([j[:3] for j in jobs])
`);
}

/** The tab whose transport sent the latest request: the processing tab, nearly always. */
async function processingTab(pages) {
  let best = pages[0];
  let latest = -1;
  for (const page of pages) {
    const last = await page.evaluate(() => window.lastRun || 0).catch(() => -1);
    if (last > latest) { latest = last; best = page; }
  }
  return best;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("chaos: crashes, closes, reloads and offline spells lose no job, double none, over-try none", async ({ context, baseURL, request }) => {
  const t0 = Date.now();
  await resetServer(request);
  await request.post("/__control/chaos", { data: { seed: SEED } });
  await context.route((url) => !url.href.startsWith(/** @type {string} */ (baseURL)), (route) => route.abort("internetdisconnected"));
  const pages = [];
  for (let i = 0; i < 3; i++) await openTab(context, baseURL, pages);

  const filed = []; // [key, id, type]
  const waves = 6;
  const per = Math.ceil(N / waves);
  const events = { crashes: 0, closed: 0, reloads: 0, offline: 0 };
  // The disturbances, spread between the waves: every crash hits the processing tab.
  const plan = [];
  for (let i = 0; i < CRASHES; i++) plan.push("crash");
  plan.splice(1, 0, "close");
  plan.splice(2, 0, "offline");
  plan.push("reload");
  if (FULL) plan.push("close", "offline", "reload");

  let next = 0;
  for (let w = 0; w < waves && next < N; w++) {
    const count = Math.min(per, N - next);
    filed.push(...await enqueueWave(pages[w % pages.length], next, count));
    next += count;
    const share = plan.splice(0, Math.ceil(plan.length / (waves - w)));
    for (const action of share) {
      await sleep(700); // let the processing tab get into its runs
      if (action === "crash") {
        const victim = await processingTab(pages);
        await crashTab(context, victim).catch(() => null);
        pages.splice(pages.indexOf(victim), 1);
        await victim.close().catch(() => {});
        events.crashes++;
        await openTab(context, baseURL, pages);
      } else if (action === "close") {
        const victim = pages.shift();
        await victim.close();
        events.closed++;
        await openTab(context, baseURL, pages);
      } else if (action === "reload") {
        const victim = await processingTab(pages);
        await boot(victim);
        events.reloads++;
      } else if (action === "offline") {
        await context.setOffline(true);
        await sleep(2000);
        await context.setOffline(false);
        events.offline++;
      }
    }
  }

  // Wait for every job to reach a terminal state, as seen in the store.
  const ids = new Map(filed.map(([key, id, type]) => [id, { key, type }]));
  let records = [];
  const deadline = Date.now() + (FULL ? 600_000 : 180_000);
  for (;;) {
    records = await py(pages[0], "json.dumps(await queue.query_all())");
    const mine = records.filter((r) => ids.has(r.id));
    if (mine.length === ids.size && mine.every((r) => ["done", "failed", "cancelled"].includes(r.status))) break;
    if (Date.now() > deadline) break;
    await sleep(1000);
  }

  // ------------------------------------------------------------ the figures
  const log = (await serverLog(request)).filter((e) => e.path.startsWith("/api/chaos/"));
  const byKey = new Map();
  for (const e of log) {
    if (!byKey.has(e.job_id)) byKey.set(e.job_id, []);
    byKey.get(e.job_id).push(e);
  }
  const recordById = new Map(records.map((r) => [r.id, r]));
  const violations = [];
  let maxOverlapMs = 0;
  let maxTries = 0;
  const counts = { done: 0, failed: 0, other: 0 };
  for (const [id, { key, type }] of ids) {
    const record = recordById.get(id);
    if (!record) { violations.push(`${key} (${id}) lost: no record in the store`); continue; }
    if (record.status === "done") counts.done++;
    else if (record.status === "failed") counts.failed++;
    else { counts.other++; violations.push(`${key} not terminal: ${record.status}`); }
    const entries = (byKey.get(key) || []).slice().sort((x, y) => x.started - y.started);
    for (let i = 1; i < entries.length; i++) {
      const overlap = (entries[i - 1].time - entries[i].started) * 1000;
      if (overlap > 0) {
        maxOverlapMs = Math.max(maxOverlapMs, overlap);
        violations.push(`${key} ran in two places at once (${overlap.toFixed(1)} ms overlap)`);
      }
    }
    const tries = entries.filter((e) => e.status !== 401).length;
    maxTries = Math.max(maxTries, tries);
    if (tries > TYPES[type]) violations.push(`${key} tried ${tries} times, max_attempts ${TYPES[type]}`);
    if (record.attempts > record.max_attempts) violations.push(`${key} record attempts ${record.attempts} > ${record.max_attempts}`);
    if (record.status === "done" && !entries.some((e) => e.status === 200)) violations.push(`${key} done without a 200 in the log`);
    const doomed = Number(key.slice(1)) % 10 === 7;
    if (doomed && record.status !== "failed") {
      violations.push(`${key} is doomed (every try fails): expected failed, got ${record.status}`);
    }
    if (record.status === "failed") {
      const params = record._params || {};
      if (params.method !== "POST" || !String(params.path).startsWith(`/api/chaos/${key}`) || !params.body || params.body.i !== Number(key.slice(1))) {
        violations.push(`${key} failed without its _params: ${JSON.stringify(record._params)}`);
      }
    }
  }
  const figures = {
    jobs: ids.size,
    ...counts,
    requests: log.length,
    tries: log.filter((e) => e.status !== 401).length,
    "401s": log.filter((e) => e.status === 401).length,
    "500s": log.filter((e) => e.status === 500).length,
    "429s": log.filter((e) => e.status === 429).length,
    "client gone mid-request": log.filter((e) => e.aborted || e.status === 0).length,
    "max tries of one job": maxTries,
    "max overlap ms": maxOverlapMs,
    ...events,
    seconds: Math.round((Date.now() - t0) / 1000),
    violations: violations.length,
  };
  console.log(`chaos figures (${FULL ? "full" : "small"}, seed ${SEED}): ${JSON.stringify(figures)}`);
  for (const v of violations.slice(0, 30)) console.log(`  violation: ${v}`);
  expect(violations).toEqual([]);
  expect(events.crashes).toBe(CRASHES);
});
