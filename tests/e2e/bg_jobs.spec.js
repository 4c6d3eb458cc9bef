// @ts-check
// <bg-jobs>: the live jobs table, driven through a real queue (scheduler worker, IndexedDB,
// the test server). The element is defined by Python (pyjobq.ui.install()); the page adds
// no JavaScript of its own beyond creating the element.
const fs = require("fs");
const path = require("path");
const { test, expect: baseExpect } = require("@playwright/test");
const { openQueuePage, py, resetServer } = require("./helpers");

// Each test loads two or three Pyodides on a 2-core machine that other suites share:
// generous waits, so a busy machine does not read as a broken table.
// A tab's own scheduler worker boots a second Pyodide; under load its first answer (the
// table's snapshot, a delete) can take tens of seconds while other tabs' updates already show.
const expect = baseExpect.configure({ timeout: 45_000 });
test.beforeEach(() => test.slow());

const SHOTS = path.join(__dirname, "..", "..", "build", "test-results", "screenshots");

/** A queue page showing <bg-jobs>; `recheckMs` shortens the table's re-reads of the store
 * (jobs_table.RECHECK_MS), the other options go to openQueuePage. */
async function openTable(context, baseURL, { recheckMs, ...options } = {}) {
  const page = await openQueuePage(context, baseURL, options);
  await py(page, `
${recheckMs === undefined ? "" : `from pyjobq.core import jobs_table\njobs_table.RECHECK_MS = ${recheckMs}`}
from pyjobq import ui
await ui.install()
await ui.install()  # idempotent
"ok"`);
  await page.evaluate(() => {
    document.body.style.cssText = "margin:0;padding:16px;background:#f0f2f5;width:1100px";
    document.body.append(document.createElement("bg-jobs"));
  });
  return page;
}

/** Enqueue a job and return its id (Python literal arguments). */
async function enqueue(page, args) {
  return py(page, `job = queue.enqueue_fetch(${args})\nawait job.stored\njob.id`);
}

const row = (page, id) => page.locator(`bg-jobs tr[data-job-id="${id}"]`);
const count = (page, status) =>
  page.locator("bg-jobs .counts li").filter({ hasText: status }).locator("b");

/** "#7d4e00" as getComputedStyle reads it: "rgb(125, 78, 0)". */
const rgb = (hex) => `rgb(${[1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)).join(", ")})`;

async function shoot(locator, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await locator.screenshot({ path: path.join(SHOTS, name), animations: "disabled" });
}

test("counts and rows for every status, live from the queue", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openTable(context, baseURL, { extra: `, yields={"heavy": "fg-lock"}` });
  // Foreground work holds the lock that "heavy" jobs yield to: they park as paused.
  await page.evaluate(() => new Promise((held) => {
    navigator.locks.request("fg-lock", () => { held(); return new Promise(() => {}); });
  }));

  const done = await py(page, `
job = queue.enqueue_fetch("POST", "/api/echo/notes", {"text": "hi"}, type="notes", label="save note")
await asyncio.wait_for(job.done, 30)
job.id`);
  const failed = await py(page, `
job = queue.enqueue_fetch("PUT", "/api/status/500", {}, type="upload", label="upload photo", max_attempts=1)
await asyncio.wait_for(job.done, 30)
job.id`);
  const refused = await py(page, `
job = queue.enqueue_fetch("POST", "/api/status/403", {}, type="publish", label="publish post")
await asyncio.wait_for(job.done, 30)
job.id`);
  const running = await enqueue(page, `"GET", "/api/slow?ms=20000", type="sync", label="sync inbox"`);
  const pending = await enqueue(page, `"POST", "/api/echo/digest", type="digest", label="send digest", delay_ms=120000`);
  const cancelled = await enqueue(page, `"POST", "/api/echo/export", type="export", label="export CSV", delay_ms=120000`);
  expect(await py(page, `await queue.cancel_job(${JSON.stringify(cancelled)})`)).toBe(true);
  const paused = await enqueue(page, `"POST", "/api/echo/decode", type="heavy", label="decode audio"`);

  // A volatile job (this tab only) reporting progress, then waiting.
  const thumb = await py(page, `
hold = asyncio.Event()
async def render(signal):
    queue.report_progress(0.42, "3 of 7 tiles")
    await hold.wait()
job = queue.enqueue(render, type="thumbnail", label="render thumbnail")
job.id`);

  await expect(row(page, running)).toHaveAttribute("data-status", "running");
  await expect(row(page, paused)).toHaveAttribute("data-status", "paused", { timeout: 15_000 });

  for (const [status, n] of Object.entries({ pending: 1, running: 2, paused: 1, done: 1, failed: 2, cancelled: 1 })) {
    await expect(count(page, status)).toHaveText(String(n));
  }
  await expect(row(page, done).locator(".pill")).toHaveText("done");

  // One table: the element draws Python's definition, the one the notebook table draws.
  const definition = await py(page, "from pyjobq.core import jobs_table\njson.dumps(jobs_table.definition())");
  await expect(page.locator("bg-jobs thead th")).toHaveText(definition.columns.map((c) => c.heading));
  await expect(page.locator("bg-jobs .counts li .pill")).toHaveText(definition.statuses.map((s) => s.label));
  const notebook = await py(page, `
import re
from pyjobq import ui
html = ui.jobs_html(await queue.query_all())
json.dumps({"headings": re.findall(r'<th scope="col"[^>]*>([^<]*)</th>', html),
            "statuses": [str(s) for s in ui.STATUSES]})`);
  expect(notebook.headings).toEqual(definition.columns.filter((c) => !c.interactive).map((c) => c.heading));
  expect(notebook.statuses).toEqual(definition.statuses.map((s) => s.status));
  // Every row shows what Python's cells say, its pill in its status's colours.
  const cells = await py(page, `
from pyjobq.core import jobs_table
json.dumps({r["id"]: jobs_table.cells(r, js.Date.now()) for r in await queue.query_all()})`);
  const looks = Object.fromEntries(definition.statuses.map((s) => [s.status, s.light]));
  for (const id of [done, failed, refused, running, pending, cancelled, paused, thumb]) {
    const c = cells[id];
    const pill = row(page, id).locator(".pill");
    await expect(pill).toHaveText(c.status.label);
    await expect(pill).toHaveCSS("color", rgb(looks[c.status.look].text));
    await expect(pill).toHaveCSS("background-color", rgb(looks[c.status.look].background));
    await expect(pill).toHaveCSS("border-top-color", rgb(looks[c.status.look].border));
    await expect(row(page, id).locator(".job-label")).toHaveText(c.job.name);
    await expect(row(page, id).locator(".job-id")).toHaveText(c.job.short_id);
    await expect(row(page, id).locator("td").nth(2)).toHaveText(c.attempts);
    await expect(row(page, id).locator(".error-msg")).toHaveText(c.error ? c.error.message : definition.no_value);
    if (c.error && c.error.code) await expect(row(page, id).locator(".code").first()).toHaveText(c.error.code);
  }
  await expect(row(page, failed)).toContainText("1 / 1");
  // One wording: the message says the status and code, so no badge repeats them.
  await expect(row(page, failed)).toContainText("answered 500 (status_500)");
  await expect(row(page, failed)).not.toContainText("HTTP 500");
  await expect(row(page, refused)).toContainText("status_403");
  await expect(row(page, refused)).toContainText("1 / 5"); // a 403 fails on its first attempt
  await expect(row(page, pending)).toContainText(/in 1 min \d+ s|in 2 min 0 s/);
  // Progress arrives as a progress-only job-update; the row keeps its other fields.
  await expect(row(page, thumb).locator("progress")).toHaveJSProperty("value", 0.42);
  await expect(row(page, thumb)).toContainText("42% · 3 of 7 tiles");
  await expect(row(page, thumb)).toContainText("render thumbnail");
  await expect(row(page, thumb).locator(".scope")).toBeVisible(); // "this tab": volatile
  await expect(row(page, running).locator(".scope")).toBeHidden();
  await expect(row(page, running).locator("progress")).toBeHidden();
  await expect(row(page, paused)).toContainText("when fg-lock is free");
  await expect(page.getByRole("button", { name: "Retry upload photo" })).toBeVisible();
  await expect(page.getByRole("button", { name: "Retry export CSV" })).toBeVisible();
  await expect(page.getByRole("button", { name: "Retry save note" })).toBeHidden();
  await expect(page.getByRole("table", { name: /Background jobs/ })).toBeVisible();
  await expect(page.getByRole("columnheader")).toHaveCount(7);

  // The countdown ticks once a second without an update.
  const before = await row(page, pending).locator("td").nth(3).textContent();
  await expect(row(page, pending).locator("td").nth(3)).not.toHaveText(before || "", { timeout: 3_000 });

  await shoot(page.locator("bg-jobs"), "bg-jobs-all-statuses.png");
});

test("retry: a failed job runs again and the server sees the second request", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openTable(context, baseURL);
  await request.post("/__control/script", { data: { key: "flaky", responses: [{ status: 500, body: { code: "server_down" } }, { status: 200, body: { ok: true } }] } });
  const id = await py(page, `
job = queue.enqueue_fetch("POST", "/api/script/flaky", {"n": 1}, label="save note", max_attempts=1)
await asyncio.wait_for(job.done, 30)
job.id`);
  await expect(row(page, id)).toHaveAttribute("data-status", "failed");
  await expect(row(page, id)).toContainText("server_down");
  await expect(count(page, "failed")).toHaveText("1");

  await page.getByRole("button", { name: "Retry save note" }).click();
  await expect(row(page, id)).toHaveAttribute("data-status", /pending|running|done/);
  await expect(row(page, id)).toHaveAttribute("data-status", "done", { timeout: 15_000 });
  await expect(count(page, "failed")).toHaveText("0");
  const log = await (await request.get("/__control/log")).json();
  expect(log.filter((r) => r.path === "/api/script/flaky").map((r) => r.status)).toEqual([500, 200]);
});

test("delete: the row disappears and the record is gone from query_all", async ({ context, baseURL, request }) => {
  await resetServer(request);
  // Jobs filed in another tab show up live in this tab's table.
  const other = await openQueuePage(context, baseURL);
  const page = await openTable(context, baseURL);
  const keep = await enqueue(other, `"POST", "/api/echo/a", type="a", label="keep me", delay_ms=120000`);
  const drop = await enqueue(other, `"POST", "/api/echo/b", type="b", label="drop me", delay_ms=120000`);
  await expect(row(page, drop)).toBeVisible();
  await page.getByRole("button", { name: "Delete drop me" }).click();
  await expect(row(page, drop)).toHaveCount(0);
  await expect(row(page, keep)).toBeVisible();
  await expect(count(page, "pending")).toHaveText("1");
  for (const tab of [page, other]) {
    const ids = await py(tab, `json.dumps([r["id"] for r in await queue.query_all()])`);
    expect(ids).toEqual([keep]);
  }
});

test("a label is text: markup in it is shown, never run", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openTable(context, baseURL);
  const label = "<img src=x onerror=window.xss=1>";
  const id = await py(page, `
job = queue.enqueue_fetch("POST", "/api/status/403", {}, label=${JSON.stringify(label)})
await asyncio.wait_for(job.done, 30)
job.id`);
  await expect(row(page, id).locator(".job-label")).toHaveText(label);
  await expect(page.getByRole("button", { name: `Retry ${label}` })).toBeVisible();
  expect(await page.locator("bg-jobs img").count()).toBe(0);
  await page.waitForTimeout(300); // an onerror would have fired by now
  expect(await page.evaluate(() => typeof window.xss)).toBe("undefined");
});

test("keyboard: Tab reaches the buttons and Enter retries", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openTable(context, baseURL);
  // The retried request succeeds: a second 500 could fail the row again faster than any poll
  // sees it leave "failed", so the row's end would race the check.
  await request.post("/__control/script", { data: { key: "mail", responses: [{ status: 500, body: { code: "server_down" } }, { status: 200, body: { ok: true } }] } });
  const id = await py(page, `
job = queue.enqueue_fetch("POST", "/api/script/mail", {}, label="send mail", max_attempts=1)
await asyncio.wait_for(job.done, 30)
job.id`);
  await expect(row(page, id)).toHaveAttribute("data-status", "failed");
  const focused = () => page.evaluate(() => {
    const host = document.activeElement;
    const inner = host && host.shadowRoot && host.shadowRoot.activeElement;
    return inner ? inner.getAttribute("aria-label") : null;
  });
  const seen = [];
  for (let i = 0; i < 6 && !seen.includes("Retry send mail"); i++) {
    await page.keyboard.press("Tab");
    seen.push(await focused());
  }
  // Tab order: "Retry all", then the row's Retry and Delete.
  expect(seen).toEqual(["Retry all failed and cancelled jobs", "Retry send mail"]);
  await expect(page.locator("bg-jobs button.retry").nth(1)).toBeFocused();
  await page.keyboard.press("Enter");
  await expect(row(page, id)).toHaveAttribute("data-status", "done", { timeout: 15_000 });
  const log = await (await request.get("/__control/log")).json();
  expect(log.filter((r) => r.path === "/api/script/mail").map((r) => r.status)).toEqual([500, 200]);
  // The row was patched in place and Retry hid itself: focus moved to the row's Delete.
  expect(await focused()).toBe("Delete send mail");
});

test("lost news: the table reads the store again while it shows an unfinished job", async ({ context, baseURL }) => {
  // A job's deletion and another's end stored by a tab that crashed before broadcasting them:
  // written here with raw IndexedDB, so no job-update is ever sent. Only the element's own
  // reads of the store (every RECHECK_MS while a row is unfinished; shortened here) can show it.
  const page = await openTable(context, baseURL, { recheckMs: 400 });
  const gone = await enqueue(page, `"POST", "/api/echo/a", type="lost", label="deleted unheard", delay_ms=600000`);
  const ended = await enqueue(page, `"POST", "/api/echo/b", type="lost2", label="cancelled unheard", delay_ms=600000`);
  // A volatile job done: its engine forgets it, and the table keeps it as heard.
  const quick = await py(page, `
async def quick(signal):
    return "ok"
job = queue.enqueue(quick, type="quick", label="done volatile")
await job.done
job.id`);
  await expect(row(page, gone)).toHaveAttribute("data-status", "pending");
  await expect(row(page, ended)).toHaveAttribute("data-status", "pending");
  await expect(row(page, quick)).toHaveAttribute("data-status", "done");
  const db = await py(page, "queue.settings.db_name");
  await page.evaluate(async ({ db, gone, ended }) => {
    const req = (r) => new Promise((resolve, reject) => { r.onsuccess = () => resolve(r.result); r.onerror = () => reject(r.error); });
    const conn = await req(indexedDB.open(db));
    const store = conn.transaction("jobs", "readwrite").objectStore("jobs");
    const record = await req(store.get(ended));
    await req(store.put({ ...record, status: "cancelled", code: "cancelled", error: "cancelled",
      next_retry_at: null, updated_at: record.updated_at + 1 }));
    await req(store.delete(gone));
    conn.close();
  }, { db, gone, ended });
  await expect(row(page, ended)).toHaveAttribute("data-status", "cancelled");
  await expect(row(page, gone)).toHaveCount(0);
  // The read that showed both was made with the done volatile row drawn: what it did not ask
  // about stays as heard (its engine has forgotten it: a listing of the store would drop it).
  await expect(row(page, quick)).toHaveAttribute("data-status", "done");
});

test("forged news: an end, a deletion or an odd row posted on the channel shows only what the store says", async ({ context, baseURL, request }) => {
  // Any script of the origin can post on the queue's channel. Its news of an end is only a
  // prompt to read the store: the row stays as stored, ten re-read periods on, and a row of
  // wrong-typed fields neither breaks the table nor outlives the read that finds no record.
  await resetServer(request);
  const page = await openTable(context, baseURL, { recheckMs: 300 });
  const running = await enqueue(page, `"GET", "/api/slow?ms=60000", type="sync", label="sync inbox"`);
  await expect(row(page, running)).toHaveAttribute("data-status", "running");
  const stored = await py(page, `
record = await queue.get_job(${JSON.stringify(running)})
json.dumps({k: v for k, v in record.items() if not k.startswith("_")}, default=str)`);
  expect(stored.status).toBe("running");
  const channel = await py(page, "queue.settings.channel_name");
  await page.evaluate(({ channel, stored }) => {
    const forger = new BroadcastChannel(channel);
    // As pyjobq posts it: JSON text, in the key order of core/messages.py make().
    const post = (...jobs) => forger.postMessage(JSON.stringify({ v: 1, type: "job-update", source: "forger", jobs }));
    post({ ...stored, status: "done", updated_at: stored.updated_at + 1e9 });
    post({ ...stored, deleted: true });
    post({ id: "nobody-filed-this", type: "sync", status: "failed", error: "forged", created_at: 1, updated_at: 1, attempts: 1, max_attempts: 1 });
    post({ id: "odd-date", type: "sync", status: "pending", label: "odd date", created_at: "2024-01-01", updated_at: "yesterday", attempts: "two" },
      { id: "odd-status", type: ["x"], status: ["done"], label: 7 });
    forger.close();
  }, { channel, stored });
  await page.waitForTimeout(3_000); // ten re-read periods
  await expect(row(page, running)).toHaveAttribute("data-status", "running");
  await expect(count(page, "done")).toHaveText("0");
  await expect(count(page, "failed")).toHaveText("0");
  await expect(row(page, "nobody-filed-this")).toHaveCount(0);
  await expect(row(page, "odd-date")).toHaveCount(0); // read: no record, so no row
  await expect(row(page, "odd-status")).toHaveCount(0);
  await expect(page.locator("bg-jobs tbody tr[data-job-id]")).toHaveCount(1);
  // The table goes on: a real job's end shows once the store holds it.
  const real = await py(page, `
job = queue.enqueue_fetch("POST", "/api/echo/notes", {"text": "hi"}, type="notes", label="save note")
await asyncio.wait_for(job.done, 30)
job.id`);
  await expect(row(page, real)).toHaveAttribute("data-status", "done");
  await expect(row(page, running)).toHaveAttribute("data-status", "running");
  await expect(page.locator("bg-jobs .note")).toHaveText("");
});
