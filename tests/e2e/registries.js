// @ts-check
// The public hosts a user's page reaches, rebuilt offline (scripts/build_site.py -> build/cdn/):
//   https://cdn.jsdelivr.net/pyodide/v<version>/full/...   stock-shaped Pyodide distributions
//                                                          whose locks do not list pyjobq
//   https://cdn.jsdelivr.net/npm/@pyscript/core@<v>/dist/  PyScript's browser bundle
//   https://pypi.org/simple/<name>/                        PyPI's Simple API (JSON) for pyjobq
//   https://files.pythonhosted.org/packages/pyjobq/<whl>   the wheel that page points at
// Playwright answers those URLs for the page and every worker it starts (nested ones too), so
// a page runs exactly as written for the real CDN: another origin, CORS headers and all. Any
// other request that leaves the test server is aborted and remembered, so a test can assert
// that nothing else was reached.
const fs = require("fs");
const path = require("path");

const ROOT = path.join(__dirname, "..", "..");
const CDN = path.join(ROOT, "build", "cdn");
const PYSCRIPT = path.join(ROOT, "node_modules", "@pyscript", "core");
const PYSCRIPT_VERSION = require(path.join(PYSCRIPT, "package.json")).version;

const TYPES = {
  ".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
  ".json": "application/json", ".zip": "application/zip", ".whl": "application/octet-stream",
  ".css": "text/css", ".toml": "text/plain",
};
// What jsDelivr and PyPI send with every file: readable from any origin.
const CORS = { "access-control-allow-origin": "*", "cross-origin-resource-policy": "cross-origin" };

/** The file under `root` for `rel`, or null when it is not there (or escapes `root`). */
function fileUnder(root, rel) {
  const file = path.normalize(path.join(root, decodeURIComponent(rel)));
  return file.startsWith(root + path.sep) && fs.existsSync(file) && fs.statSync(file).isFile() ? file : null;
}

function serve(route, file, type) {
  if (!file) return route.fulfill({ status: 404, headers: CORS, contentType: "text/plain", body: "not found" });
  return route.fulfill({ status: 200, headers: CORS, contentType: type || TYPES[path.extname(file)] || "application/octet-stream", path: file });
}

/**
 * Route the registries' host names to build/cdn for every page and worker of `context`;
 * block everything else outside `baseURL`.
 * @returns {Promise<{leaks: string[], served: string[]}>}
 */
async function useRegistries(context, baseURL) {
  if (!fs.existsSync(path.join(CDN, "pypi", "simple", "pyjobq", "index.json"))) {
    throw new Error("build/cdn is missing: run `make build`");
  }
  const leaks = [];
  const served = [];
  await context.route((url) => !url.href.startsWith(baseURL) && !/^(blob|data):/.test(url.protocol), (route) => {
    const url = new URL(route.request().url());
    let m;
    if (url.host === "cdn.jsdelivr.net" && (m = url.pathname.match(/^\/pyodide\/(v[^/]+\/full\/.+)$/))) {
      served.push(url.href);
      return serve(route, fileUnder(path.join(CDN, "pyodide"), m[1]));
    }
    if (url.host === "cdn.jsdelivr.net" && (m = url.pathname.match(/^\/npm\/@pyscript\/core@([^/]+)\/(dist\/.+)$/))) {
      served.push(url.href);
      return serve(route, m[1] === PYSCRIPT_VERSION ? fileUnder(PYSCRIPT, m[2]) : null);
    }
    if (url.host === "pypi.org" && (m = url.pathname.match(/^\/simple\/([^/]+)\/?$/))) {
      served.push(url.href);
      return serve(route, fileUnder(path.join(CDN, "pypi", "simple"), `${m[1]}/index.json`), "application/vnd.pypi.simple.v1+json");
    }
    if (url.host === "files.pythonhosted.org" && (m = url.pathname.match(/^\/packages\/pyjobq\/([^/]+)$/))) {
      served.push(url.href);
      return serve(route, fileUnder(path.join(CDN, "pypi", "files"), m[1]));
    }
    leaks.push(url.href);
    return route.abort("internetdisconnected");
  });
  return { leaks, served };
}

module.exports = { useRegistries, PYSCRIPT_VERSION };
