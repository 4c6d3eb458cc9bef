// A stand-in for JupyterLite's Pyodide kernel: a module worker that loads Pyodide from this
// site, installs pyjobq and runs the user's Python — here, one persistent job through a
// pyfetch transport to the test server. Started by worker-host.html with ?key=<unique>.
// It posts {type: "globals"} first (what this scope has), then {type: "outcome"} or {type: "error"}.
const post = (message) => self.postMessage(message);
post({
  type: "globals",
  window: typeof window,
  document: typeof document,
  worker: typeof Worker,
  isWorkerScope: typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope,
});
try {
  const key = new URLSearchParams(self.location.search).get("key") || "default";
  const { loadPyodide } = await import("/pyodide/pyodide.mjs");
  const pyodide = await loadPyodide();
  await pyodide.loadPackage(["pyjobq"], { messageCallback: () => {} });
  pyodide.globals.set("KEY", key);
  const outcome = await pyodide.runPythonAsync(`
import asyncio, json
import js
from pyodide.http import pyfetch
import pyjobq

async def send(method, path, body):
    kw = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers={"Content-Type": "application/json"}, **kw)

pyjobq.configure(transport=send)
from pyjobq import queue

python_sees = {"window": hasattr(js, "window"), "document": hasattr(js, "document")}
job = queue.enqueue_fetch("POST", f"/api/echo/hosts-kernel-{KEY}", {"host": "worker"}, label="kernel job")
out = await asyncio.wait_for(job.done, 60)
html = queue._repr_html_()
json.dumps({"id": job.id, "status": out.status, "result": out.result, "http_status": out.http_status,
            "python_sees": python_sees, "repr_html_has_job": job.id in html})
`);
  post({ type: "outcome", ...JSON.parse(outcome) });
} catch (error) {
  post({ type: "error", message: String((error && error.stack) || error) });
}
