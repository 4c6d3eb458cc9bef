// pyjobq's conformance suite: each case is written once and runs in Chromium, Firefox and
// WebKit through tests/engines/drivers.mjs. Each case has a database, lock and channel of its
// own (a fresh origin state) and opens its own tabs.
import assert from "node:assert/strict";
import { sleep, until } from "./drivers.mjs";

/** Python that configures the queue on a case's own names, with a transport to the test server
 * that records each send in `runs` and every `job-update` this tab hears in `updates`. */
export function configure(names, { extra = "", call = true, transport = true } = {}) {
  return `
import json, asyncio, pyjobq
from pyodide.http import pyfetch

runs = []
async def send(method, path, body):
    kw = {} if body is None else {"body": json.dumps(body)}
    runs.append(path)
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"}, **kw)

pyjobq.configure(${transport ? "transport=send, " : ""}db_name=${JSON.stringify(names.db)}, lock_name=${JSON.stringify(names.lock)},
                 channel_name=${JSON.stringify(names.channel)}${extra})
from pyjobq import queue
updates = []
${call ? "queue.on_update(lambda u: updates.append(dict(u)))" : ""}
"ok"`;
}

/** Python that writes an importable transport module (a Service Worker imports it by name). */
const SW_APP = `
import os, sys
os.makedirs("/home/pyodide/sw_app", exist_ok=True)
open("/home/pyodide/sw_app/__init__.py", "w").close()
with open("/home/pyodide/sw_app/transport.py", "w") as f:
    f.write('''
import json
import js
from pyodide.http import pyfetch

SENDER = str(js.globalThis.constructor.name)

async def send(method, path, body):
    kw = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json", "X-Sender": SENDER}, **kw)
''')
if "/home/pyodide" not in sys.path:
    sys.path.insert(0, "/home/pyodide")
"ok"`;

/** JavaScript that keeps each console line the page writes (info and up) in consoleLines. */
const RECORD_CONSOLE = `() => {
  window.consoleLines = [];
  for (const level of ["info", "warn", "error"]) {
    const original = console[level].bind(console);
    console[level] = (...args) => { window.consoleLines.push(args.join(" ")); original(...args); };
  }
}`;

/** How many console lines the page wrote that contain `text` (after RECORD_CONSOLE). */
const linesWith = (tab, text) => tab.evaluate(`(text) => window.consoleLines.filter((l) => l.includes(text)).length`, text);

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

/** `count` tabs, opened and configured on `names` one after the other. */
async function configuredTabs(open, names, count) {
  const tabs = [];
  for (let i = 0; i < count; i++) {
    const tab = await open();
    await tab.py(configure(names));
    tabs.push(tab);
  }
  return tabs;
}

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
      const tabs = await configuredTabs(open, names, 3);
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
      const [a, b] = await configuredTabs(open, names, 2);
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
      const [a, b] = await configuredTabs(open, names, 2);
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
  {
    name: "another tab takes over when the processing tab is killed mid-run",
    // WebKit: its driver loses the session with the killed page (the other tab runs on), so
    // the takeover is read from the server's log alone.
    async run({ open, server, names, engineLost }) {
      const tabs = await configuredTabs(open, names, 2);
      const id = await tabs[0].py(file("POST", "/api/hold/killed", { n: 5 }));
      await until(async () => (await server.holding()).includes("killed"), 60_000, "the held request");
      const runner = (await tabs[0].py("json.dumps(len(runs))")) > 0 ? 0 : 1;
      await tabs[runner].kill();
      const other = tabs[1 - runner];
      // The killed tab's request stays held at the server; the other tab's makes a second.
      await until(async () => (await server.sent("/api/hold/killed")).length + (await server.holding()).length >= 2,
                  90_000, "the job sent again by the tab that took over");
      await server.release("killed");
      await until(async () => (await server.sent("/api/hold/killed")).filter((e) => e.status === 200).length >= 2,
                  30_000, "both sends answered");
      if (!engineLost()) assert.equal((await other.py(outcome(id, 90))).status, "done");
      await sleep(500);
      const sent = (await server.sent("/api/hold/killed")).length;
      assert.ok(sent >= 1 && sent <= 2, `sent ${sent} times: at most once more than before the kill`);
    },
  },
  {
    name: "<bg-jobs> shows a failed job and retries it",
    async run({ open, server, names }) {
      const tab = await open();
      await tab.py(configure(names));
      await tab.py(`
from pyjobq import ui
await ui.install()
"ok"`);
      await tab.evaluate(`() => { document.body.append(document.createElement("bg-jobs")); }`);
      await server.script("table", [{ status: 500, body: { code: "server_down" } }, { status: 200, body: { ok: true } }]);
      const id = await tab.py(`
_job = queue.enqueue_fetch("POST", "/api/script/table", {}, label="save note", max_attempts=1)
await asyncio.wait_for(_job.done, 30)
json.dumps(_job.id)`);
      const row = `(id) => {
        const tr = document.querySelector("bg-jobs").shadowRoot.querySelector(\`tr[data-job-id="\${id}"]\`);
        return tr ? { status: tr.getAttribute("data-status"), text: tr.textContent } : null;
      }`;
      const failed = await until(async () => {
        const r = await tab.evaluate(row, id);
        return r && r.status === "failed" ? r : null;
      }, 45_000, "the failed row");
      assert.ok(failed.text.includes("server_down"), `the row names the error: ${failed.text}`);
      await tab.evaluate(`() => document.querySelector("bg-jobs").shadowRoot
                                  .querySelector('button[aria-label="Retry save note"]').click()`);
      await until(async () => (await tab.evaluate(row, id))?.status === "done", 45_000, "the retried row done");
      assert.deepEqual((await server.sent("/api/script/table")).map((e) => e.status), [500, 200]);
    },
  },
  {
    name: "a worker that cannot start: every persistent call raises WorkerUnavailable within seconds",
    async run({ open, names }) {
      const tab = await open();
      await tab.py(configure(names, { extra: ', pyodide_url="/nowhere/"' }));
      const got = await tab.py(`
import time
async def _raised(awaitable):
    try:
        await asyncio.wait_for(awaitable, 30)
        return "answered"
    except pyjobq.WorkerUnavailable as exc:
        return [exc.code, exc.stage, "/nowhere/pyodide.mjs" in str(exc)]
_t0 = time.monotonic()
_r = [await _raised(queue.enqueue_fetch("POST", "/api/echo/never", {}).stored), await _raised(queue.query_all())]
_elapsed = time.monotonic() - _t0
async def _work(signal):
    return "still here"
json.dumps({"raised": _r, "elapsed": _elapsed, "volatile": (await asyncio.wait_for(queue.enqueue(_work).done, 20)).result})`);
      assert.deepEqual(got.raised, [["worker_not_started", "import", true], ["worker_not_started", "import", true]]);
      assert.ok(got.elapsed < 15, `answered within seconds, not ${got.elapsed} s`);
      assert.equal(got.volatile, "still here");
    },
  },
  {
    name: "a tab whose download stalls never holds the lease; another tab runs its job",
    async run({ open, server, names }) {
      const a = await open();
      // A's worker fetches Pyodide from a path whose .wasm the server holds back.
      await a.py(configure(names, { extra: ', pyodide_url="/__stalled/pyodide/", worker_start_timeout_ms=10_000' }));
      const id = await a.py(file("POST", "/api/echo/stalled", { n: 6 }));
      await until(async () => (await server.holding()).includes("download"), 60_000, "the stalled download");
      const b = await open();
      await b.py(configure(names));
      try {
        // B runs A's job; A hears the end on its own handle.
        assert.equal((await a.py(outcome(id, 90))).status, "done");
        assert.equal((await b.py(outcome(id))).status, "done");
        assert.equal(await a.py("json.dumps(len(runs))"), 0, "A sent nothing");
        assert.equal((await server.sent("/api/echo/stalled")).length, 1);
      } finally {
        await server.release("download");
      }
    },
  },
  {
    name: "bad input gets a clear error at the call and loses nothing",
    async run({ open, server, names }) {
      const tab = await open();
      await tab.py(configure(names));
      const got = await tab.py(`
def _refused(call):
    try:
        call()
    except pyjobq.InvalidJobError as exc:
        return str(exc)
    return None
_big = "x" * 2_000_000
_good = queue.enqueue_fetch("POST", "/api/echo/big", {"text": _big})
await asyncio.wait_for(_good.stored, 30)
_errors = {
    "nan": _refused(lambda: queue.enqueue_fetch("POST", "/api/echo/bad", {"x": float("nan")})),
    "int key": _refused(lambda: queue.enqueue_fetch("POST", "/api/echo/bad", {1: "a"})),
    "delay_ms": _refused(lambda: queue.enqueue_fetch("POST", "/api/echo/bad", {}, delay_ms=-5)),
    "delete_job": _refused(lambda: queue.delete_job(123)),
}
_done = await asyncio.wait_for(_good.done, 60)
_not_async = queue.enqueue(lambda signal: 1)
_sync = await asyncio.wait_for(_not_async.done, 20)
json.dumps({"errors": _errors, "done": [_done.status, len(_done.result["body"]["text"])],
            "sync": [_sync.status, _sync.code], "ids": sorted(r["id"] for r in await queue.query_all()),
            "filed": sorted([_good.id, _not_async.id])})`);
      assert.match(got.errors.nan, /body must be JSON-like/);
      assert.match(got.errors["int key"], /would not come back as it was/);
      assert.match(got.errors.delay_ms, /delay_ms must be a finite number >= 0, got -5/);
      assert.match(got.errors.delete_job, /delete_job\(job_id\): expected a job's id/);
      assert.deepEqual(got.done, ["done", 2_000_000], "a 2 MB body stored whole and sent");
      assert.deepEqual(got.sync, ["failed", "executor_not_async"]);
      assert.deepEqual(got.ids, got.filed, "nothing half-written: only the jobs that were filed");
      assert.equal((await server.log()).filter((e) => e.path === "/api/echo/bad").length, 0);
    },
  },
  {
    name: "the Service Worker sends what is left with every tab closed",
    async run({ open, server, names, engine }) {
      const tab = await open();
      await tab.evaluate(RECORD_CONSOLE);
      await tab.py(SW_APP);
      await tab.py(configure(names, { extra: ', transport="sw_app.transport:send", service_worker="/pyjobq-sw.mjs"', transport: false }));
      const sync = await tab.evaluate(`async () => "sync" in (await navigator.serviceWorker.ready)`);
      assert.equal(sync, engine === "chromium", "Background Sync only where the engine has it");
      // Due in 8 s: the tab closes before then, so only the Service Worker can send it.
      await tab.py(file("POST", "/api/echo/sw", { n: 7 }, ", delay_ms=8000"));
      const due = Date.now() + 8_000;
      const said = () => linesWith(tab, "cannot be woken by Background Sync");
      if (!sync) await until(async () => (await said()) > 0, 5_000, "the page saying there is no Background Sync");
      await tab.py(file("POST", "/api/echo/sw-second", { n: 8 }, ", delay_ms=8000"));
      await sleep(500);
      assert.equal(await said(), sync ? 0 : 1, "said once where Background Sync is missing, never where it is there");
      await tab.close();
      await sleep(Math.max(0, due - Date.now()) + 1_000);
      const blank = await open("/tests/blank.html", { ready: false });
      if (sync) {
        // Chromium fires its sync while the tab was still open (the drain yields to a page):
        // a page's message wakes the Service Worker now.
        await blank.evaluate(`async (db) => (await navigator.serviceWorker.ready).active.postMessage({ pyjobq_sw: "drain", db })`, names.db);
      } else {
        // No Background Sync: the Service Worker drains each time it starts. A new version
        // of the script is a real start.
        await blank.evaluate(`async () => { await navigator.serviceWorker.register("/pyjobq-sw.mjs?start=" + Date.now(), { type: "module" }); }`);
      }
      const [sent] = await until(async () => {
        const log = await server.sent("/api/echo/sw");
        return log.length ? log : null;
      }, 120_000, "the Service Worker's send");
      assert.equal(sent.sender, "ServiceWorkerGlobalScope");
      await until(async () => (await server.sent("/api/echo/sw-second")).length, 60_000, "the second job's send");
      await sleep(1_000);
      for (const path of ["/api/echo/sw", "/api/echo/sw-second"]) {
        assert.deepEqual((await server.sent(path)).map((e) => [e.sender, e.status]), [["ServiceWorkerGlobalScope", 200]], `${path} sent once, by the Service Worker`);
      }
    },
  },
  {
    name: "a Service Worker that cannot be registered is said on the console; tabs send as always",
    async run({ open, server, names }) {
      const tab = await open();
      await tab.evaluate(RECORD_CONSOLE);
      await tab.py(SW_APP);
      await tab.py(configure(names, { extra: ', transport="sw_app.transport:send", service_worker="/no-such-sw.mjs"', transport: false }));
      const id = await tab.py(file("POST", "/api/echo/no-sw", { n: 9 }));
      assert.equal((await tab.py(outcome(id))).status, "done");
      const text = "/no-such-sw.mjs could not be registered as a module Service Worker";
      // At once where the browser answers; WebKit never does, and the page says so after 30 s.
      await until(async () => (await linesWith(tab, text)) > 0, 45_000, "the console line");
      assert.equal(await linesWith(tab, text), 1, "said once");
      assert.deepEqual((await server.sent("/api/echo/no-sw")).map((e) => [e.sender, e.status]), [["Window", 200]]);
    },
  },
];
