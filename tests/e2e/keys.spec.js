// @ts-check
// Keys that replace, on real pages: two tabs of one origin, their workers, IndexedDB's by_key
// index, the BroadcastChannel and the test server. Tab A files a delayed save under a key; tab B
// files the same key: the server receives only B's request, and A's handle — in the other tab —
// resolves cancelled with the code "replaced".
const { test, expect: baseExpect } = require("@playwright/test");
const { openQueuePage, py, resetServer, serverLog, storedRecord } = require("./helpers");

const expect = baseExpect.configure({ timeout: 60_000 });

/** Python: file, from tab `tab` ("a" or "b": the job is `<tab>_job` on its page), a save of doc-1
 * under the key "doc-1", delayed `delayMs`; gives its id once stored. */
function saveDoc(tab, delayMs) {
  return `
${tab}_job = queue.enqueue_fetch("PUT", "/api/echo/doc-1/from-${tab}", {"from": "${tab}"}, key="doc-1",
                            delay_ms=${delayMs}, label="save doc-1")
await asyncio.wait_for(${tab}_job.stored, 60)
${tab}_job.id`;
}

test("a key replaced from a second tab: the server gets only the newer request, the first tab's done says replaced", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const a = await openQueuePage(context, baseURL);
  const aId = await py(a, saveDoc("a", 20_000));
  const b = await openQueuePage(context, baseURL);
  const bId = await py(b, saveDoc("b", 500));
  expect(bId).not.toBe(aId);

  const replaced = await py(a, `
_o = await asyncio.wait_for(a_job.done, 60)
json.dumps({"status": _o.status, "code": _o.code, "error": _o.error})`);
  expect(replaced).toEqual({ status: "cancelled", code: "replaced", error: "replaced by a newer job of its key" });
  // The old record went in the transaction that stored the new one: nothing is left behind.
  expect(await storedRecord(a, aId)).toBeNull();

  const done = await py(b, `
_o = await asyncio.wait_for(b_job.done, 90)
json.dumps({"status": _o.status, "code": _o.code})`);
  expect(done).toEqual({ status: "done", code: null });
  const record = await storedRecord(b, bId);
  expect(record).toMatchObject({ id: bId, key: "doc-1", status: "done" });

  // Past A's own delay too: its request never reaches the server.
  await a.waitForTimeout(1_000);
  const paths = (await serverLog(request)).map((/** @type {any} */ r) => r.path);
  expect(paths.filter((/** @type {string} */ p) => p.startsWith("/api/echo/doc-1"))).toEqual(["/api/echo/doc-1/from-b"]);

  // Tab A heard the replacement as news: deleted, with the code.
  const news = await py(a, `
json.dumps([u for u in updates if u.get("id") == a_job.id and u.get("deleted")])`);
  expect(news).toEqual([expect.objectContaining({ id: aId, deleted: true, code: "replaced", key: "doc-1" })]);
});
