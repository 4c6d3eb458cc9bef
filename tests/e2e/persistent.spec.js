// @ts-check
// One persistent job end to end: stored in IndexedDB by the scheduler worker, replayed
// through the page's transport against a real server, with its job-update in every tab.
const { test, expect } = require("@playwright/test");
const { openQueuePage, workerReady, py, resetServer } = require("./helpers");

test("a persistent job completes with the server's JSON and another tab sees it", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const a = await openQueuePage(context, baseURL);
  const b = await openQueuePage(context, baseURL);
  const outcome = await py(a, `
job = queue.enqueue_fetch("POST", "/api/echo/notes", {"text": "hello"}, label="save note")
out = await asyncio.wait_for(job.done, 30)
json.dumps({"id": job.id, "status": out.status, "result": out.result, "http_status": out.http_status})
`);
  expect(outcome.status).toBe("done");
  expect(outcome.http_status).toBe(200);
  expect(outcome.result).toMatchObject({ method: "POST", path: "/api/echo/notes", body: { text: "hello" } });

  // Tab B heard the same job's updates over the BroadcastChannel, ending in done.
  await expect.poll(async () => py(b, `json.dumps([u["status"] for u in updates if u["id"] == ${JSON.stringify(outcome.id)}])`))
    .toContain("done");
  const seenInB = await py(b, `json.dumps([u["status"] for u in updates if u["id"] == ${JSON.stringify(outcome.id)}])`);
  expect(seenInB).toEqual(expect.arrayContaining(["pending", "running", "done"]));

  // The record is in IndexedDB under the default name, with its _params.
  const stored = await a.evaluate(async (id) => {
    const db = await new Promise((resolve, reject) => {
      const r = indexedDB.open("ui-jobs");
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    const names = Array.from(db.objectStoreNames);
    const tx = db.transaction("jobs");
    const store = tx.objectStore("jobs");
    const indexes = Array.from(store.indexNames).sort();
    const record = await new Promise((resolve) => { const q = store.get(id); q.onsuccess = () => resolve(q.result); });
    return { version: db.version, names, indexes, record };
  }, outcome.id);
  expect(stored.version).toBe(2); // the spec's version 1, by_key (keys that replace), schedules
  expect(stored.names).toEqual(["jobs", "schedules"]);
  expect(stored.indexes).toEqual(["by_group", "by_group_status", "by_key", "by_next_retry", "by_status"]);
  expect(stored.record.status).toBe("done");
  expect(stored.record._params).toEqual({ method: "POST", path: "/api/echo/notes", body: { text: "hello" } });

  // The server saw exactly one request for it.
  const log = await (await request.get("/__control/log")).json();
  expect(log.filter((r) => r.path === "/api/echo/notes")).toHaveLength(1);
});

test("the worker's warnings reach the DevTools console", async ({ context, baseURL }) => {
  const page = await openQueuePage(context, baseURL);
  await workerReady(page); // the only tab: it holds the lease, so its worker loads Pyodide
  const warnings = [];
  page.on("console", (msg) => { if (msg.type() === "warning") warnings.push(msg.text()); });
  // A foreign message on the channel: the scheduler worker ignores it and says so.
  await py(page, `
queue.enqueue_fetch("POST", "/api/echo/console", None)
import js
js.BroadcastChannel.new("ui-jobs").postMessage("not a pyjobq message")
"ok"
`);
  await expect.poll(() => warnings.join("\n")).toContain("pyjobq worker: ");
  expect(warnings.join("\n")).toContain("ignored a channel message");
});
