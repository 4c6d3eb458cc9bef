// A page with Pyodide on its main thread and pyjobq installed; Playwright tests drive it
// through window.py(code), which runs Python (top-level await allowed) and returns its
// value, JSON-decoded when it is a string of JSON. Used by harness.html, csp.html and the
// benchmark page (web/bench/index.html).
const { loadPyodide } = await import("/pyodide/pyodide.mjs");
const pyodide = await loadPyodide();
await pyodide.loadPackage(["pyjobq"], { messageCallback: () => {} });
window.pyodide = pyodide;
window.py = async (code) => {
  const value = await pyodide.runPythonAsync(code);
  if (typeof value !== "string") return value && value.toJs ? value.toJs({ dict_converter: Object.fromEntries }) : value;
  try { return JSON.parse(value); } catch { return value; }
};
document.getElementById("status").textContent = "ready";
window.pyReady = true;
