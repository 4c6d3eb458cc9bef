// @ts-check
// docs/service-worker.md's transport, as written: imported by name from app/transport.py with no
// app/__init__.py (as PyScript's "files" leaves it), it sends a job within the API and refuses
// a record that names another origin (the origin check README explains).
const { test, expect } = require("@playwright/test");
const { docExample, py, resetServer, serverLog, harnessReady } = require("./helpers");

test.beforeEach(async ({ request }) => resetServer(request));

test("the Service Worker doc's transport imports by name, sends within the API and refuses another origin", async ({ page, request }) => {
  await page.goto("/tests/harness.html");
  await harnessReady(page);
  const module = docExample("service-worker.md", "app/transport.py");
  const out = await py(page, `
import os, sys, json, asyncio
os.makedirs("/home/pyodide/app", exist_ok=True)  # no __init__.py: a namespace package
with open("/home/pyodide/app/transport.py", "w") as f:
    f.write(${JSON.stringify(module)})
if "/home/pyodide" not in sys.path:
    sys.path.insert(0, "/home/pyodide")
import pyjobq
pyjobq.configure(db_name="sw-doc", lock_name="sw-doc-lock", channel_name="sw-doc",
                 transport="app.transport:send")
from pyjobq import queue
ok = queue.enqueue_fetch("POST", "/api/echo/doc-transport", {"n": 1})
away = queue.enqueue_fetch("POST", "https://elsewhere.example/steal", {"n": 2})
_ok, _away = [await asyncio.wait_for(j.done, 60) for j in (ok, away)]
json.dumps({"path": queue.settings.transport_path, "ok": [_ok.status, _ok.http_status, ok.id],
            "away": [_away.status, _away.error]})`);
  expect(out.path).toBe("app.transport:send");
  const [status, httpStatus, id] = out.ok;
  expect([status, httpStatus]).toEqual(["done", 200]);
  expect(out.away[0]).toBe("failed");
  expect(out.away[1]).toContain("refusing to send a job to https://elsewhere.example/steal");
  const sent = (await serverLog(request)).filter((r) => r.path.includes("doc-transport") || r.path.includes("steal"));
  expect(sent.map((r) => [r.path, r.idempotency_key])).toEqual([["/api/echo/doc-transport", id]]);
});
