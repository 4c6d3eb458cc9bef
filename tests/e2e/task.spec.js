// @ts-check
// @pyjobq.task across a hard reload: a page declares a task and files a job
// of it that cannot run yet; the page is hard-reloaded (its Python is gone, the job is only in
// IndexedDB). A reloaded page whose code declares the task again runs it to done; one whose
// code lacks it fails it as orphaned, and the error names the task.
const { test, expect: baseExpect } = require("@playwright/test");
const { openQueuePage, py, configurePython, resetServer, serverLog, harnessReady, storedRecord } =
  require("./helpers");

const expect = baseExpect.configure({ timeout: 30_000 });

/** Python that declares the task, before configure() and before the queue starts (as a
 * page's first module would): its default name is __main__:save_note. */
const TASK = `
from pyodide.http import pyfetch

@pyjobq.task(type="notes", label="save note")
async def save_note(signal, doc_id: str, text: str, *, draft: bool = False):
    answer = await pyfetch(f"/api/echo/task-{doc_id}", method="PUT",
                           headers={"Content-Type": "application/json"},
                           body=json.dumps({"text": text, "draft": draft}))
    return {"http": answer.status, "echo": (await answer.json())["body"]}
`;

/** A hard reload (no cache, as Shift+Reload): the page's Python and its queue are gone. */
async function hardReload(context, page) {
  const cdp = await context.newCDPSession(page);
  await cdp.send("Page.reload", { ignoreCache: true });
  await cdp.detach();
  await harnessReady(page);
}

/** File a task job the page cannot run before the reload (it waits out a delay). */
async function fileBeforeReload(page) {
  return py(page, `
job = save_note.options(delay_ms=4000).enqueue("doc-7", "kept across the reload", draft=True)
await job.stored
json.dumps(job.id)
`);
}

test("@task: after a hard reload the page that declares the task again runs it to done", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL, { reconstructors: TASK });
  const id = await fileBeforeReload(page);
  expect(await storedRecord(page, id)).toMatchObject({
    status: "pending", type: "notes", label: "save note", _reconstructor: "__main__:save_note",
    _params: { args: ["doc-7", "kept across the reload"], kwargs: { draft: true } },
  });
  const reloadedAt = Date.now();
  await hardReload(context, page);
  expect(await py(page, "import sys, json\njson.dumps('pyjobq.queue' in sys.modules)")).toBe(false);
  await py(page, configurePython({ reconstructors: TASK }));

  const out = await py(page, `
_job = queue.job(${JSON.stringify(id)})
_result = await _job.result(timeout=40)
json.dumps({"result": _result, "status": await _job.status()})
`);
  expect(out).toEqual({
    status: "done",
    result: { http: 200, echo: { text: "kept across the reload", draft: true } },
  });
  const log = (await serverLog(request)).filter((e) => e.path === "/api/echo/task-doc-7");
  expect(log).toHaveLength(1); // run once, on the reloaded page
  expect(log[0].started * 1000).toBeGreaterThan(reloadedAt);
  expect(await storedRecord(page, id)).toMatchObject({ status: "done", attempts: 1 });
  // pyjobq.jobs filters where IndexedDB is read (its status and group indexes).
  expect(await py(page, `json.dumps([[r["id"], r["status"]] for r in await pyjobq.jobs(status="done", type="notes")])`))
    .toEqual([[id, "done"]]);
  expect(await py(page, `json.dumps(await pyjobq.jobs(status="done", type="elsewhere"))`)).toEqual([]);
});

test("@task: a reloaded page whose code lacks the task fails its job as orphaned, naming it", async ({ context, baseURL, request }) => {
  await resetServer(request);
  const page = await openQueuePage(context, baseURL, { reconstructors: TASK });
  const id = await fileBeforeReload(page);
  await hardReload(context, page);
  await py(page, configurePython()); // this version of the page has no save_note

  const out = await py(page, `
try:
    await queue.job(${JSON.stringify(id)}).result(timeout=40)
    _failed = None
except pyjobq.JobFailed as exc:
    _failed = {"status": exc.outcome.status, "code": exc.code, "error": exc.outcome.error}
json.dumps(_failed)
`);
  expect(out).toMatchObject({ status: "failed", code: "orphaned" });
  expect(out.error).toContain("'__main__:save_note'");
  expect(out.error).toContain("@pyjobq.task");
  expect((await serverLog(request)).filter((e) => e.path === "/api/echo/task-doc-7")).toEqual([]);
  expect(await storedRecord(page, id)).toMatchObject({ status: "failed", code: "orphaned" });
});
