// @ts-check
// In Chromium: a busy page in a real tab. Long synchronous Python on the page (a
// notebook cell computing) blocks its event loop while its scheduler worker runs on: the
// worker's handshake deadline passes with the page unable to answer `run`. The job must run
// once the page is free, not fail `handshake_timeout`. The CPython twin, with the
// frozen tab, is tests/test_bad_days.py. Only states are asserted.
const { test, expect } = require("@playwright/test");
const { openHarness, py, storedRecord, workerReady } = require("./helpers");

test.setTimeout(240_000);

const SETUP = `
import asyncio, time, pyjobq

RUNS = []
HOLD = {}

def hold(params):
    async def run(signal):
        HOLD["slow"] = asyncio.get_running_loop().create_future()
        return await HOLD["slow"]
    return run

def noop(params):
    async def run(signal):
        RUNS.append(params["n"])
        return {"n": params["n"]}
    return run

pyjobq.configure(reconstructors={"noop": noop, "hold": hold}, handshake_timeout_ms=2000)
from pyjobq import queue
"ok"
`;

test("a page busy past the handshake deadline runs its job once it is free", async ({ context }) => {
  const page = await openHarness(context, { setup: SETUP });
  await workerReady(page, 120);
  // A long job of another type keeps the worker's pass (and so the lease) going: the page-held
  // lease is lent to a pass, and a busy page can lend it to no new one. The job comes due in
  // 1.5 s, stored now; by then the page computes for 12 s without yielding, so the worker's
  // `run` arrives, and its 2 s handshake deadline passes, while the page is busy.
  await py(page, `
slow = queue.enqueue_persistent("hold", {}, type="slow")
for _ in range(600):
    if "slow" in HOLD: break
    await asyncio.sleep(0.1)
"ok"`);
  const id = await py(page, `
job = queue.enqueue_persistent("noop", {"n": 1}, delay_ms=1500)
await job.stored
job.id`);
  const busyCall = py(page, `
started = time.monotonic()
while time.monotonic() < started + 12:
    pass
[len(RUNS), time.time() * 1000]`);
  // Another page of the origin reads IndexedDB meanwhile: the worker claims the job while the
  // page computes (its `run` waits at the busy page).
  const reader = await context.newPage();
  await reader.goto("/tests/blank.html");
  await expect.poll(async () => (await storedRecord(reader, id))?.status, { timeout: 60_000 }).toBe("running");
  const claimedAt = (await storedRecord(reader, id)).updated_at;
  const [runsWhileBusy, busyUntil] = await busyCall;
  expect(runsWhileBusy).toBe(0);
  expect(busyUntil - claimedAt).toBeGreaterThan(2000); // the handshake deadline passed while busy
  const outcome = await py(page, `
o = await asyncio.wait_for(queue.job(${JSON.stringify(id)}).done, 60)
[o.status, o.code is None, len(RUNS)]`);
  expect(outcome).toEqual(["done", true, 1]); // done, no error code, run once
  await py(page, `HOLD["slow"].set_result({"ok": True})
"ok"`);
  const record = await storedRecord(page, id);
  expect([record.status, record.code ?? null, record.attempts]).toEqual(["done", null, 1]);
});
