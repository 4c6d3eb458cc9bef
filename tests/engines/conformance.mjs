// pyjobq's conformance suite: each case is written once and runs in Chromium, Firefox and
// WebKit through tests/engines/drivers.mjs. Each case has a database, lock and channel of its
// own (a fresh origin state) and opens its own tabs.
import assert from "node:assert/strict";
import { sleep, until } from "./drivers.mjs";

/** Python that configures the queue on a case's own names, with a transport to the test server
 * that records each send in `runs` and every `job-update` this tab hears in `updates`. */
export function configure(names, { extra = "", call = true } = {}) {
  return `
import json, asyncio, pyjobq
from pyodide.http import pyfetch

runs = []
async def send(method, path, body):
    kw = {} if body is None else {"body": json.dumps(body)}
    runs.append(path)
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"}, **kw)

pyjobq.configure(transport=send, db_name=${JSON.stringify(names.db)}, lock_name=${JSON.stringify(names.lock)},
                 channel_name=${JSON.stringify(names.channel)}${extra})
from pyjobq import queue
updates = []
${call ? "queue.on_update(lambda u: updates.append(dict(u)))" : ""}
"ok"`;
}

/** The outcome of job `id` once it ends, as JSON-able fields. */
const outcome = (id, seconds = 60) => `
_o = await asyncio.wait_for(queue.job(${JSON.stringify(id)}).done, ${seconds})
json.dumps({"status": _o.status, "http_status": _o.http_status, "code": _o.code, "result": _o.result})`;

const file = (method, path, body, kw = "") => `
_job = queue.enqueue_fetch(${JSON.stringify(method)}, ${JSON.stringify(path)}, ${JSON.stringify(body)}${kw})
await asyncio.wait_for(_job.stored, 20)
json.dumps(_job.id)`;

/** The job's stored record, read through the queue. */
const stored = (id) => `json.dumps(next((r for r in await queue.query_all() if r["id"] == ${JSON.stringify(id)}), None))`;

export const CASES = [
  {
    name: "a persistent job end to end with its Outcome",
    async run({ open, server, names }) {
      const tab = await open();
      await tab.py(configure(names));
      const id = await tab.py(file("POST", "/api/echo/e2e", { n: 1 }));
      const out = await tab.py(outcome(id));
      assert.deepEqual(out, { status: "done", http_status: 200, code: null,
                              result: { method: "POST", path: "/api/echo/e2e", body: { n: 1 }, job_id: null } });
      assert.equal((await server.sent("/api/echo/e2e")).length, 1);
    },
  },
  {
    name: "a hard reload resumes stored work with no call",
    async run({ open, server, names }) {
      const tab = await open();
      await tab.py(configure(names));
      const id = await tab.py(file("POST", "/api/echo/reload", { n: 2 }, ", delay_ms=4000"));
      await tab.reload();
      // Only configured and imported: nothing filed, nothing awaited on this page.
      await tab.py(configure(names, { call: false }));
      await until(async () => (await server.sent("/api/echo/reload")).length === 1, 60_000, "the stored job sent after the reload");
      const rec = await until(async () => {
        const r = await tab.py(stored(id));
        return r && r.status === "done" ? r : null;
      }, 30_000, "the job's record done");
      assert.equal(rec.attempts, 1);
    },
  },
  {
    name: "one processing tab among three; another takes over when it closes mid-run",
    async run({ open, server, names }) {
      const tabs = [];
      for (let i = 0; i < 3; i++) {
        const tab = await open();
        await tab.py(configure(names));
        tabs.push(tab);
      }
      const id = await tabs[1].py(file("POST", "/api/hold/takeover", { n: 3 }));
      await until(async () => (await server.holding()).includes("takeover"), 60_000, "the held request");
      const sending = [];
      for (const [i, tab] of tabs.entries()) if ((await tab.py("json.dumps(len(runs))")) > 0) sending.push(i);
      assert.equal(sending.length, 1, `exactly one tab sends, not ${JSON.stringify(sending)}`);
      const [runner] = sending;
      await tabs[runner].close();
      const rest = tabs.filter((_, i) => i !== runner);
      // Another tab takes over and sends it again (at least once, as designed): release it.
      await until(async () => (await server.sent("/api/hold/takeover")).length + (await server.holding()).length >= 2,
                  90_000, "the job sent again by the tab that took over");
      await server.release("takeover");
      const out = await rest[0].py(outcome(id, 90));
      assert.equal(out.status, "done");
      await sleep(500);
      const sent = (await server.sent("/api/hold/takeover")).length;
      assert.ok(sent >= 1 && sent <= 2, `sent ${sent} times: at most once more than before the close`);
    },
  },
  {
    name: "live job-update news in every tab",
    async run({ open, names }) {
      const a = await open();
      await a.py(configure(names));
      const b = await open();
      await b.py(configure(names));
      const id = await b.py(file("POST", "/api/echo/news", { n: 4 }));
      assert.equal((await b.py(outcome(id))).status, "done");
      for (const tab of [a, b]) {
        await until(() => tab.py(`json.dumps(any(u["id"] == ${JSON.stringify(id)} and u["status"] == "done" for u in updates))`),
                    30_000, "the done news in every tab");
      }
    },
  },
  {
    name: "401 waits for a token, 403 and 404 fail at once, 5xx retries",
    async run({ open, server, names }) {
      const tab = await open();
      await tab.py(configure(names));
      await server.script("flaky", [{ status: 503 }, { status: 200, body: { ok: true } }]);
      const ids = await tab.py(`
_jobs = [queue.enqueue_fetch("POST", p, {}, type=t) for p, t in
         (("/api/auth/x", "auth"), ("/api/status/403", "s403"), ("/api/status/404", "s404"), ("/api/script/flaky", "flaky"))]
await asyncio.wait_for(asyncio.gather(*(j.stored for j in _jobs)), 20)
json.dumps([j.id for j in _jobs])`);
      const [auth, s403, s404, flaky] = ids;
      const o403 = await tab.py(outcome(s403));
      assert.deepEqual([o403.status, o403.http_status, o403.code], ["failed", 403, "status_403"]);
      const o404 = await tab.py(outcome(s404));
      assert.deepEqual([o404.status, o404.http_status], ["failed", 404]);
      assert.equal((await tab.py(outcome(flaky, 60))).status, "done");
      assert.deepEqual((await server.sent("/api/script/flaky")).map((e) => e.status), [503, 200]);
      const rec = await until(async () => {
        const r = await tab.py(stored(auth));
        return r && r.http_status === 401 ? r : null;
      }, 30_000, "the 401 stored");
      assert.equal(rec.status, "pending");
      assert.equal(rec.attempts, 0, "a 401 costs no attempt");
    },
  },
  {
    name: "a key replaces the job waiting before it, across tabs",
    async run({ open, server, names }) {
      const a = await open();
      await a.py(configure(names));
      const b = await open();
      await b.py(configure(names));
      const first = await a.py(file("PUT", "/api/echo/doc", { v: 1 }, ', key="doc", delay_ms=3000'));
      const second = await b.py(file("PUT", "/api/echo/doc", { v: 2 }, ', key="doc", delay_ms=3000'));
      assert.equal((await a.py(outcome(first))).code, "replaced");
      assert.equal((await b.py(outcome(second))).status, "done");
      const bodies = (await server.log()).filter((e) => e.path === "/api/echo/doc");
      assert.equal(bodies.length, 1, "only the newest of the key is sent");
    },
  },
  {
    name: "lanes: two types side by side, one type one at a time",
    async run({ open, server, names }) {
      const tab = await open();
      await tab.py(configure(names));
      const ids = await tab.py(`
_jobs = [queue.enqueue_fetch("POST", p, {}, type=t) for p, t in
         (("/api/hold/a1", "a"), ("/api/hold/a2", "a"), ("/api/hold/b1", "b"))]
await asyncio.wait_for(asyncio.gather(*(j.stored for j in _jobs)), 20)
json.dumps([j.id for j in _jobs])`);
      // Type b runs beside type a; a's second job waits for its first.
      await until(async () => {
        const held = await server.holding();
        return held.includes("a1") && held.includes("b1");
      }, 60_000, "a1 and b1 on the wire together");
      await sleep(1_000);
      assert.ok(!(await server.holding()).includes("a2"), "a2 waits behind a1 in type a's lane");
      await server.release("b1");
      await server.release("a1");
      await until(async () => (await server.holding()).includes("a2"), 30_000, "a2 once a1 ended");
      await server.release("a2");
      for (const id of ids) assert.equal((await tab.py(outcome(id))).status, "done");
    },
  },
  {
    name: "delay_ms holds a job back until it is due",
    async run({ open, server, names }) {
      const tab = await open();
      await tab.py(configure(names));
      const id = await tab.py(file("POST", "/api/echo/later", {}, ", delay_ms=3000"));
      const filed = Date.now();
      await sleep(1_500);
      assert.equal((await server.sent("/api/echo/later")).length, 0, "not sent before its delay");
      assert.equal((await tab.py(outcome(id, 30))).status, "done");
      const [sent] = await server.sent("/api/echo/later");
      assert.ok(sent.started * 1000 >= filed + 2_500, "sent once due, not before");
    },
  },
  {
    name: "volatile jobs run, and suspend_type holds them",
    async run({ open, names }) {
      const tab = await open();
      await tab.py(configure(names));
      const got = await tab.py(`
_ran = []
async def _work(signal):
    _ran.append(1)
    return "worked"
await queue.suspend_type("later")
_held = queue.enqueue(_work, type="later")
_now = queue.enqueue(_work, type="now")
_o = await asyncio.wait_for(_now.done, 20)
await asyncio.sleep(0.5)
_before = len(_ran)
await queue.resume_type("later")
_o2 = await asyncio.wait_for(_held.done, 20)
json.dumps([_o.status, _o.result, _before, _o2.status])`);
      assert.deepEqual(got, ["done", "worked", 1, "done"]);
    },
  },
];
