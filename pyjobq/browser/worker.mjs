// pyjobq's scheduler worker: a module Web Worker running Pyodide and pyjobq.
// The page starts it from Python (pyjobq.browser.runtime), as a Blob URL or a served copy of
// this file, whose #hash carries the queue's names (DevTools -> Sources shows which database
// this page is on) and the page's Pyodide index URL.
//
// It loads Pyodide only once its tab holds the processor lease: until then it is this script
// and nothing more, waiting in the lock's queue, so a second tab costs no second Pyodide.
// On a page the page holds the lease and sends the boot message when it gets it; in a worker
// host (a notebook kernel) this script takes the lock itself and keeps it while it lives.
// The boot message carries the page's Pyodide lock and a zip of the pyjobq files the page
// imported, which this worker unpacks, so it runs the page's own pyjobq however that got
// installed. Messages that arrive before the scheduler listens are buffered and replayed in
// order. It says {type: "worker_alive"} once its script and Pyodide's loader are in,
// {type: "worker_booting"} as it starts loading Pyodide, and reports any failure as
// {type: "worker_error", stage, message}: the page fails its persistent requests with it
// instead of waiting for ever.
const params = Object.fromEntries(new URLSearchParams(self.location.hash.slice(1)));
const say = (type, fields = {}) => self.postMessage(JSON.stringify({ v: 1, type, ...fields }));
const early = [];
let booted;
const boot = new Promise((resolve) => { booted = resolve; });
self.onmessage = (event) => {
  const data = event.data;
  if (data && typeof data === "object" && data.pyjobq_boot === 1) booted(data);
  else early.push(data);
};
const BUNDLE_DIR = "/lib/pyjobq-worker";
let stage = "import";
try {
  const { loadPyodide } = await import(params.index + "pyodide.mjs");
  say("worker_alive");
  stage = "load";
  if (params.lease === "worker") {
    // Held for this worker's life; released when it ends (or by pyjobq when it stops for good).
    await new Promise((granted) => {
      navigator.locks.request(params.lock, () => new Promise((release) => {
        self.pyjobqReleaseLease = release;
        granted();
      }));
    });
  }
  const { lockfile, lockfile_base: lockfileBase, bundle } = await boot;
  say("worker_booting");
  const options = { indexURL: params.index };
  if (lockfile) Object.assign(options, { lockFileContents: lockfile, packageBaseUrl: lockfileBase || params.index });
  const pyodide = await loadPyodide(options);
  // Debugging hook: the worker's Pyodide, for DevTools' worker console, scripts/bench.mjs
  // (wasm heap, live-proxy counts) and tests (a waiting worker has none). Nothing in pyjobq reads it.
  self.pyodide = pyodide;
  stage = "install";
  if (params.packages) {
    await pyodide.loadPackage(JSON.parse(params.packages), { messageCallback: () => {}, errorCallback: (m) => console.error(m) });
  } else {
    pyodide.unpackArchive(bundle, "zip", { extractDir: BUNDLE_DIR });
    pyodide.runPython(`import sys\nsys.path.insert(0, ${JSON.stringify(BUNDLE_DIR)})`);
  }
  const main = pyodide.pyimport("pyjobq.browser.worker_main");
  stage = "start";
  self.onmessage = null;
  main.start(JSON.stringify(params), early.splice(0));
} catch (error) {
  const message = String((error && error.stack) || error);
  console.error(`pyjobq worker (${stage}): ${message}`);
  say("worker_error", { stage, message });
  if (self.pyjobqReleaseLease) self.pyjobqReleaseLease();
}
