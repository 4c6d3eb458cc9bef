// A stand-in for JupyterLite's Pyodide kernel that takes cells from its page: a module worker
// (no window, no DOM) that loads Pyodide from this site, installs pyjobq and runs each
// {id, code} it is sent with runPythonAsync, answering {id, ok, value} or {id, ok: false, error}.
// It posts {type: "ready"} once Python runs. tests/e2e/takeover.spec.js drives it.
const { loadPyodide } = await import("/pyodide/pyodide.mjs");
const pyodide = await loadPyodide();
await pyodide.loadPackage(["pyjobq"], { messageCallback: () => {} });
self.onmessage = async (event) => {
  const { id, code } = event.data || {};
  if (typeof id !== "number") return;
  try {
    const value = await pyodide.runPythonAsync(code);
    self.postMessage({ id, ok: true, value: value && value.toJs ? value.toJs() : value });
  } catch (error) {
    self.postMessage({ id, ok: false, error: String((error && error.message) || error) });
  }
};
self.postMessage({ type: "ready" });
