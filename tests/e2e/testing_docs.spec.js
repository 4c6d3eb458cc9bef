// @ts-check
// docs/testing.md's cross-tab example, verbatim (tests/test_docs_testing.py checks it is).
const { test, expect } = require("@playwright/test");
const { openTab, py, jobs, waitForStatus, crashTab } = require("../../pyjobq/testing/playwright.cjs");

// Your page's URL; it loads Pyodide and pyjobq (ours: the test harness).
const APP = "/tests/harness.html";
// Python each tab runs once Pyodide is up: configure the queue as your app does.
const SETUP = `
import json, pyjobq
from pyodide.http import pyfetch

async def send(method, path, body):
    return await pyfetch(path, method=method, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})

pyjobq.configure(transport=send)
`;

async function saveNote(tab, text) {
  return py(tab, `
job = pyjobq.enqueue_fetch("POST", "/api/echo/notes", {"text": ${JSON.stringify(text)}}, type="notes")
await job.stored
json.dumps(job.id)`);
}

test("a note saved in one tab is sent once, and another tab takes over when the first crashes", async ({ context, request }) => {
  await request.post("/__control/reset");
  const first = await openTab(context, APP, { setup: SETUP }); // opened first: it processes
  const second = await openTab(context, APP, { setup: SETUP });

  const id = await saveNote(second, "hello");
  await waitForStatus(second, id, "done");
  await waitForStatus(first, id, "done"); // every tab lists it, from the shared store

  await crashTab(context, first);
  const after = await saveNote(second, "after the crash");
  expect((await waitForStatus(second, after, "done")).status).toBe("done");
  expect((await jobs(second)).filter((j) => [id, after].includes(j.id)).map((j) => j.status)).toEqual(["done", "done"]);

  const log = await (await request.get("/__control/log")).json();
  expect(log.filter((e) => e.path === "/api/echo/notes").length).toBe(2); // each sent once
});
