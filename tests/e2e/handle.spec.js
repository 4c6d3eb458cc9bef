// @ts-check
// The Job handle on a real page (the persistent queue: its worker, IndexedDB, the test server):
// a waiter whose asyncio.wait_for(job.done, short) times out stops only its own wait — a
// second waiter, started before the timeout, and `await job` after it still get the outcome.
const { test, expect: baseExpect } = require("@playwright/test");
const { openQueuePage, py, resetServer, holding, release } = require("./helpers");

const expect = baseExpect.configure({ timeout: 30_000 });

test.afterEach(async ({ request }) => {
  await release(request); // never leave a handler thread blocked on a hold
});

test("a wait_for(job.done) that times out leaves the outcome to every other waiter", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL);

  const gaveUp = await py(page, `
job = queue.enqueue_fetch("POST", "/api/hold/handle", {"n": 1})
second = asyncio.ensure_future(asyncio.wait_for(job.done, 60))
try:
    await asyncio.wait_for(job.done, 0.3)
    _timed_out = False
except asyncio.TimeoutError:
    _timed_out = True
json.dumps({"timed_out": _timed_out, "done": job.done.done(), "second_waits": not second.done()})
`);
  expect(gaveUp).toEqual({ timed_out: true, done: false, second_waits: true });

  await expect.poll(() => holding(request)).toContain("handle"); // the request is on the server
  await release(request, "handle");

  const outcomes = await py(page, `
_first = await second
_again = await job
json.dumps({"status": _first.status, "http_status": _first.http_status, "same": _again == _first,
            "typed": _first.status is pyjobq.Status.DONE, "result": job.done.result().status})
`);
  expect(outcomes).toEqual({ status: "done", http_status: 200, same: true, typed: true, result: "done" });
});
