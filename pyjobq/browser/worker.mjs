// pyjobq's scheduler worker: a module Web Worker running Pyodide and pyjobq.
// The page starts it from Python (pyjobq.browser.runtime), as a Blob URL or a served copy of
// this file, whose #hash carries the queue's names (DevTools -> Sources shows which database
// this page is on) and the page's Pyodide index URL. The page's first message is the boot
// message: its Pyodide lock and a zip of the pyjobq files it imported, which this worker
// unpacks, so it runs the page's own pyjobq however that got installed. Messages that arrive
// while Pyodide loads are buffered and replayed in order once the scheduler listens.
// Any failure is reported as {type: "worker_error", stage, message}: the page fails its
// persistent requests with it instead of waiting for ever.
const params = Object.fromEntries(new URLSearchParams(self.location.hash.slice(1)));
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
  stage = "load";
  const { lockfile, lockfile_base: lockfileBase, bundle } = await boot;
  const options = { indexURL: params.index };
  if (lockfile) Object.assign(options, { lockFileContents: lockfile, packageBaseUrl: lockfileBase || params.index });
  const pyodide = await loadPyodide(options);
  // Debugging hook: the worker's Pyodide, for DevTools' worker console and scripts/bench.mjs
  // (wasm heap, live-proxy counts). Nothing in pyjobq reads it.
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
  self.postMessage(JSON.stringify({ v: 1, type: "worker_error", stage, message }));
}
