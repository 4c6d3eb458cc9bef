// Bench-only wrapper around pyjobq's scheduler worker (see bench.mjs traceSchedulerWorkers).
// It timestamps the handshake messages (performance.timeOrigin-based ms), then imports
// pyjobq's own worker.mjs from the Blob URL the page made; worker.mjs reads the same #hash.
// Requests {bench:{cmd}} with a MessagePort never reach pyjobq:
//   trace      -> {trace: [[dir, type, job_id, t], ...]} and clears it
//   memory     -> the worker Pyodide's wasm heap, live PyProxies (tracked since "track") and
//                 Python objects; {cmd:"memory", track:true} starts proxy tracking afresh
//   python     -> {value: str(the last expression of `code`)} run in the worker's Pyodide
//   python_async -> the same through runPythonAsync (top-level await)
//                 (bench.mjs --profile: cProfile around the one-type row)
const params = new URLSearchParams(self.location.hash.slice(1));
const TRACED = new Set(["run", "run_started", "run_result", "enqueue", "reply", "ready"]);
let trace = [];
const now = () => performance.timeOrigin + performance.now();
// The type is read from the text's head (pyjobq's messages begin {"v": N, "type": "..."), and
// only a traced message is parsed: the news, one or more a job, pass untouched, so the wrapper
// costs the worker's thread a string test a message, not a JSON.parse.
const TYPE_AT = /^\{"v": \d+, "type": "([a-z_-]+)"/;
function note(dir, data) {
  if (typeof data !== "string" || data.length > 4096) return;
  const head = TYPE_AT.exec(data.slice(0, 40));
  if (!head || !TRACED.has(head[1])) return;
  const t = now();
  let msg;
  try { msg = JSON.parse(data); } catch { return; }
  trace.push([dir, msg.type, msg.job_id ?? null, t]);
}
const post = self.postMessage.bind(self);
self.postMessage = (data, ...rest) => { note("out", data); return post(data, ...rest); };
// worker.mjs buffers early messages through self.onmessage, but it evaluates only once the
// import below has fetched it: hold what arrives before then and hand it over when it sets
// onmessage (afterwards its own listeners hear every message directly).
let handler = null;
const pending = [];
Object.defineProperty(self, "onmessage", {
  configurable: true,
  get: () => handler,
  set: (fn) => { handler = fn; taken = true; if (fn) for (const e of pending.splice(0)) fn(e); },
});
let taken = false; // worker.mjs has set onmessage once: no more buffering here
self.addEventListener("message", (event) => {
  const request = event.data && event.data.bench;
  if (!request) {
    note("in", event.data);
    if (handler) handler(event);
    else if (!taken) pending.push(event);
    return;
  }
  event.stopImmediatePropagation();
  const port = event.ports[0];
  if (request.cmd === "trace") { port.postMessage({ trace }); trace = []; return; }
  if (request.cmd === "python") {
    const py = self.pyodide;
    port.postMessage(py ? { value: String(py.runPython(request.code)) } : { error: "pyodide not loaded" });
    return;
  }
  if (request.cmd === "python_async") {
    const py = self.pyodide;
    if (!py) { port.postMessage({ error: "pyodide not loaded" }); return; }
    py.runPythonAsync(request.code).then(
      (value) => port.postMessage({ value: String(value) }),
      (error) => port.postMessage({ error: String(error) }));
    return;
  }
  if (request.cmd === "memory") {
    const py = self.pyodide;
    if (!py) { port.postMessage({ error: "pyodide not loaded" }); return; }
    const m = py._module;
    if (request.track) { m.pyproxy_alloc_map.clear(); m.enable_pyproxy_allocation_tracing(); }
    port.postMessage({
      wasm_heap: m.HEAP8.length,
      live_proxies: m.pyproxy_alloc_map.size,
      py_objects: py.runPython("import gc; gc.collect(); len(gc.get_objects())"),
    });
  }
});
await import(params.get("bench_blob"));
