// @ts-check
// @pyjobq.periodic in Chromium: two tabs define the same schedule (every 2 s); whichever holds
// the processor lease enqueues each slot once, in one IndexedDB transaction with the schedule's
// advance. The server's log counts the runs: one per slot, never two; both tabs' <bg-jobs> tables
// show the occurrences; the stored schedule says which slot was last accounted for.
const { test, expect: baseExpect } = require("@playwright/test");
const { openQueuePage, py, resetServer, serverLog } = require("./helpers");

const expect = baseExpect.configure({ timeout: 45_000 });
test.beforeEach(() => test.slow());

const EVERY_MS = 2000;
const NAME = "e2e:ping";

// Defined before the queue is imported (configurePython imports it last), as a page does.
const SCHEDULE = `
from datetime import timedelta

@pyjobq.periodic(every=timedelta(milliseconds=${EVERY_MS}), name="${NAME}", label="ping")
async def ping(signal):
    job_id = pyjobq.current_job_id()
    response = await send("POST", f"/api/echo/periodic-ping/{js.document.title}/{job_id}", None)
    if not response.ok:
        raise RuntimeError(f"ping answered {response.status}")
    return response.status
`;

async function openTable(context, baseURL, title) {
  const page = await openQueuePage(context, baseURL, { reconstructors: SCHEDULE });
  await page.evaluate((t) => { document.title = t; }, title);
  await py(page, "from pyjobq import ui\nawait ui.install()\n'ok'");
  await page.evaluate(() => document.body.append(document.createElement("bg-jobs")));
  return page;
}

/** The occurrence jobs as this tab lists them, oldest first. */
async function occurrences(page) {
  return py(page, `
import json
rows = [r for r in await pyjobq.query_all() if r["id"].startswith("periodic:${NAME}:")]
json.dumps([{"id": r["id"], "status": r["status"], "slot": r["_params"]["slot"]} for r in rows])`);
}

test("two tabs, one schedule: each 2 s slot runs once, and both tables show the runs", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const first = await openTable(context, baseURL, "first");
  const second = await openTable(context, baseURL, "second");
  // Let several slots pass with both tabs open.
  await expect.poll(async () => (await occurrences(first)).filter((r) => r.status === "done").length,
    { timeout: 60_000 }).toBeGreaterThanOrEqual(4);
  await second.waitForTimeout(3 * EVERY_MS);

  const jobs = await occurrences(second);
  const done = jobs.filter((r) => r.status === "done");
  const slots = jobs.map((r) => r.slot);
  // Every slot once, and slots on the 2 s grid, in order.
  expect(new Set(slots).size).toBe(slots.length);
  for (const slot of slots) expect(slot % EVERY_MS).toBe(0);
  expect([...slots].sort((a, b) => a - b)).toEqual(slots);

  // The server saw one request per occurrence that ran: none ran twice.
  const pings = (await serverLog(request))
    .filter((e) => e.path.startsWith("/api/echo/periodic-ping/"))
    .map((e) => e.path.split("/").slice(4));
  const ran = pings.map(([, jobId]) => decodeURIComponent(jobId));
  expect(new Set(ran).size).toBe(ran.length);
  for (const job of done) expect(ran).toContain(job.id);
  expect(ran.length).toBeLessThanOrEqual(jobs.length);
  // Only the lease holder's page runs jobs: one tab ran them all.
  expect(new Set(pings.map(([tab]) => tab)).size).toBe(1);

  // The stored schedule, read by either tab: the latest slot is accounted for.
  const stored = await py(second, `
import json
json.dumps(await pyjobq.schedules())`);
  expect(stored).toHaveLength(1);
  expect(stored[0]).toMatchObject({ name: NAME, every_ms: EVERY_MS, label: "ping" });
  expect(stored[0].last_slot).toBeGreaterThanOrEqual(Math.max(...slots));

  // Both tables show the occurrences as jobs like any other (job-update news).
  for (const page of [first, second]) {
    const row = page.locator(`bg-jobs tr[data-job-id="${done[0].id}"]`);
    await expect(row).toContainText("ping");
    await expect(row).toContainText("done");
  }

  // Unscheduled from one tab: no tab enqueues it any more.
  expect(await py(first, `await pyjobq.unschedule("${NAME}")`)).toBe(true);
  await first.waitForTimeout(500);
  const before = (await occurrences(first)).length;
  await first.waitForTimeout(3 * EVERY_MS);
  expect((await occurrences(second)).length).toBe(before);
});
