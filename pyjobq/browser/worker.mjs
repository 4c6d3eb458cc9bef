// pyjobq's scheduler worker: a module Web Worker running Pyodide and pyjobq.
// The page starts it from Python (pyjobq.browser.runtime) as a Blob URL whose
// #hash carries the queue's names, so DevTools -> Sources shows which database
// this page is on. Messages that arrive while Pyodide loads are buffered and
// replayed in order once the scheduler listens.
const params = Object.fromEntries(new URLSearchParams(self.location.hash.slice(1)));
const early = [];
self.onmessage = (event) => early.push(event.data);
try {
  const { loadPyodide } = await import(params.index + "pyodide.mjs");
  const pyodide = await loadPyodide({ indexURL: params.index });
  // Debugging hook: the worker's Pyodide, for DevTools' worker console and scripts/bench.mjs
  // (wasm heap, live-proxy counts). Nothing in pyjobq reads it.
  self.pyodide = pyodide;
  await pyodide.loadPackage(JSON.parse(params.packages || '["pyjobq"]'), { messageCallback: () => {} });
  self.onmessage = null;
  const main = pyodide.pyimport("pyjobq.browser.worker_main");
  main.start(JSON.stringify(params), early.splice(0));
} catch (error) {
  self.postMessage(JSON.stringify({ v: 1, type: "worker_error", message: String(error && error.stack || error) }));
  throw error;
}
