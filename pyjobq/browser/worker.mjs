// pyjobq's scheduler worker: a module Web Worker running Pyodide and pyjobq.
// The page starts it from Python (pyjobq.browser.page_main), as a Blob URL or a served copy of
// this file, whose #hash carries the queue's names (DevTools -> Sources shows which database
// this page is on) and the page's Pyodide index URL.
//
// It starts Pyodide only once its tab holds the processor lease. Until then it holds the
// distribution's files and nothing more: Pyodide's loader, the module that makes a Pyodide
// (imported, not run), and pyodide.asm.wasm and python_stdlib.zip as bytes (in Cache Storage,
// on disk, so a waiting tab costs no more memory than before). Its page gets in
// line for the lease only once it has them, so a tab that takes over while the network is
// down boots from what it fetched while waiting, and a tab that cannot fetch them never holds
// the lease. On a page the page holds the lease and sends the boot message when it gets it;
// in a worker host (a notebook kernel) this script takes the lock itself once it has the
// files and keeps it while it lives. The boot message carries the page's Pyodide lock and a
// zip of the pyjobq files the page imported, which this worker unpacks, so it runs the page's
// own pyjobq however that got installed. Messages that arrive before the scheduler listens
// are buffered and replayed in order.
//
// What it says, in order: {type: "worker_alive"} once its script and Pyodide's loader are in,
// {type: "worker_progress", bytes} at most once a second while the files arrive,
// {type: "worker_fetched"} once it has them all, {type: "worker_booting"} as it starts
// Pyodide; any failure as {type: "worker_error", stage, message, refused} (refused: a
// Content-Security-Policy refused something). The page (pyjobq.executor.boot) bounds the time between
// two of these, ends a worker that failed or stalled, and starts a new one when it can.
//
// Preloaded (a plain page's one line, docs/guide.md "Start the worker with the page"):
//   new Worker("/pyjobq-worker.mjs#preload&index=/pyodide/", { type: "module" })
// started before the page's own loadPyodide, this worker fetches the distribution and — when
// no tab holds the processor lease, so this tab is the one that will process — starts its
// Pyodide at once, beside the page's, instead of after the lease. It says nothing until the
// page's pyjobq attaches ({pyjobq_attach: 1}): it answers {type: "worker_attached", index}
// first (the page ends it if that is not its own distribution), then what it would have said.
// The boot message then carries the page's parameters (`params`), which this URL lacks.
const params = Object.fromEntries(new URLSearchParams(self.location.hash.slice(1)));
const preload = "preload" in params;
if (params.index) params.index = new URL(params.index, self.location.href).href;
let attached = !preload;
const unsaid = [];
const say = (type, fields = {}) => {
  const message = JSON.stringify({ v: 1, type, ...fields });
  if (attached) self.postMessage(message);
  else unsaid.push(message);
};
const early = [];
let booted;
const boot = new Promise((resolve) => { booted = resolve; });
// A worker host's page found the holder silent while this worker waits in line (lease_steal,
// pyjobq/engine/lease.py): take the lock from it. Buffered too: pyjobq's lease hears it once it runs.
let stealLease = () => {};
self.onmessage = (event) => {
  const data = event.data;
  if (data && typeof data === "object" && data.pyjobq_boot === 1) booted(data);
  else if (data && typeof data === "object" && data.pyjobq_attach === 1) {
    if (attached) return;
    attached = true;
    self.postMessage(JSON.stringify({ v: 1, type: "worker_attached", index: params.index || "" }));
    for (const message of unsaid.splice(0)) self.postMessage(message);
  } else {
    if (typeof data === "string" && data.includes('"lease_steal"')) stealLease();
    early.push(data);
  }
};
// A policy that refuses a download or wasm compilation here is reported in this worker, not on the page.
let refused = false;
self.addEventListener("securitypolicyviolation", () => { refused = true; });
const BUNDLE_DIR = "/lib/pyjobq-worker";

// The files are kept in Cache Storage (on disk: a waiting tab's memory stays what it was), under
// one name for the origin, each overwritten by every worker that fetches it — but only where
// the origin has plenty of room, so they never crowd the app's own storage out. Elsewhere (an
// insecure context, a nearly full quota, a put that fails) they are held in this worker's memory.
const CACHE = "pyjobq-distribution";
const ROOM = 256 * 1024 * 1024;

/** Cache Storage for the kept files, or null: hold them in memory. */
async function diskCache(index) {
  try {
    const { quota = 0, usage = 0 } = await navigator.storage.estimate();
    if (quota - usage < ROOM) {
      await caches.delete(CACHE);
      return null;
    }
    const cache = await caches.open(CACHE);
    // Files of another distribution than this one (an upgrade) are of no more use.
    for (const request of await cache.keys()) if (!request.url.startsWith(index)) await cache.delete(request);
    return cache;
  } catch {
    return null;
  }
}

/** Fetch the distribution's files this worker needs to boot: the Pyodide module's factory
 *  (imported, not run) and the rest as bytes; returns them with `take(url)`. */
async function fetchDistribution(index) {
  const cache = await diskCache(index);
  const kept = new Map(); // url -> () => Promise<Response | undefined>, each taken once
  let received = 0;
  let told = Date.now();
  const counted = () => new TransformStream({
    transform(chunk, controller) {
      received += chunk.length;
      if (Date.now() - told >= 1000) {
        told = Date.now();
        say("worker_progress", { bytes: received });
      }
      controller.enqueue(chunk);
    },
  });
  const download = async (url, type) => {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    return new Response(response.body.pipeThrough(counted()), { headers: { "Content-Type": type } });
  };
  const keep = async (name) => {
    const url = index + name;
    const type = name.endsWith(".wasm") ? "application/wasm" : name.endsWith(".json") ? "application/json" : "application/zip";
    if (cache) {
      try {
        await cache.put(url, await download(url, type));
        kept.set(url, () => cache.match(url));
        return;
      } catch (error) {
        if (!(error instanceof DOMException) || error.name !== "QuotaExceededError") throw error;
        // The origin's storage filled up meanwhile: this one file is held in memory instead.
      }
    }
    const bytes = await (await download(url, type)).arrayBuffer();
    kept.set(url, async () => new Response(bytes, { headers: { "Content-Type": type } }));
  };
  const names = ["pyodide.asm.wasm", "python_stdlib.zip"];
  if (params.own_lock) names.push("pyodide-lock.json"); // another distribution than the page's: its own lock
  const [asm] = await Promise.all([import(index + "pyodide.asm.mjs"), ...names.map(keep)]);
  return {
    createPyodideModule: asm.default,
    take: (url) => {
      const file = kept.get(url);
      kept.delete(url);
      return file ? file() : Promise.resolve(undefined);
    },
  };
}

// The digest of the installed pyjobq's RECORD (every file and its sha256): the page computes
// the same of its own (pyjobq.browser.page_main.record_digest).
const RECORD_DIGEST = `
from importlib import metadata
import hashlib
try:
    record = metadata.distribution("pyjobq").read_text("RECORD") or ""
except metadata.PackageNotFoundError:
    record = ""
hashlib.sha256(record.encode()).hexdigest() if record else ""
`;

/** A preloaded worker's Pyodide with the distribution's pyjobq installed and its scheduler
 *  imported, when the distribution has pyjobq ({pyodide, main: null} otherwise). */
async function preinstall(pyodide) {
  try {
    await pyodide.loadPackage(["pyjobq"], { messageCallback: () => {}, errorCallback: () => {} });
    const main = pyodide.pyimport("pyjobq.browser.worker_main");
    const record = pyodide.runPython(RECORD_DIGEST);
    if (record) say("worker_preinstalled", { record });
    return { pyodide, main };
  } catch {
    return { pyodide, main: null }; // not in its lock: the page's files come with the boot message
  }
}

/** Whether some tab of the origin holds the processor lease (or no answer: assume it does). */
async function leaseHeld(name) {
  try {
    const { held = [] } = await navigator.locks.query();
    return held.some((lock) => lock.name === name);
  } catch {
    return true;
  }
}

/** Run `load` with this worker's fetch answering the kept files (each once), then the network's again. */
async function servedFrom({ take }, load) {
  const network = self.fetch;
  self.fetch = async (input, init) => {
    const url = new URL(typeof input === "string" || input instanceof URL ? String(input) : input.url, params.index).href;
    return (await take(url)) || network.call(self, input, init);
  };
  try {
    return await load();
  } finally {
    self.fetch = network;
  }
}

let stage = "import";
try {
  const pyodideModule = params.index + "pyodide.mjs";
  // WebKit's error does not name the module ("Importing a module script failed."): say which.
  const { loadPyodide } = await import(pyodideModule).catch((error) => {
    throw String(error).includes(pyodideModule) ? error : new TypeError(`${error.message} (${pyodideModule})`);
  });
  say("worker_alive");
  stage = "fetch";
  const files = await fetchDistribution(params.index);
  say("worker_fetched");
  stage = "load";
  if (params.lease === "worker") {
    // Held for this worker's life; released when it ends (or by pyjobq when it stops for good),
    // or taken by a tab in line that found this worker silent (frozen): pyjobq's lease
    // (pyjobq.engine.lease.HostLease) reads pyjobqLeaseStolen when it starts, and hears the event after.
    await new Promise((granted) => {
      const inLine = new AbortController();
      const hold = () => new Promise((release) => {
        self.pyjobqReleaseLease = release;
        granted();
      });
      const taken = () => {
        if (!self.pyjobqReleaseLease) return; // a queued request dropped for the steal below
        self.pyjobqLeaseStolen = true;
        self.dispatchEvent(new Event("pyjobq-lease-stolen"));
      };
      navigator.locks.request(params.lock, { signal: inLine.signal }, hold).catch(taken);
      stealLease = () => {
        if (self.pyjobqReleaseLease) return;
        stealLease = () => {};
        inLine.abort();
        navigator.locks.request(params.lock, { steal: true }, hold).catch(taken);
      };
    });
  }
  // createPyodideModule: Pyodide's loader takes the module made above instead of importing it
  // again (pinned by tests/e2e/boot.spec.js: a tab that takes over offline boots).
  const options = { indexURL: params.index, createPyodideModule: files.createPyodideModule };
  // Preloaded, and no tab processes yet: this one will, so its Pyodide starts now (with the
  // distribution's own lock, which is the page's). In line behind another tab it waits like
  // any worker, and a waiting tab costs no second Pyodide.
  // It also installs the distribution's pyjobq (a plain page loads it with loadPackage) and
  // imports its scheduler while the page is still loading; the boot message says whether those
  // are the page's own files (the digest of its RECORD), and otherwise they are forgotten.
  const earlyStart = preload && params.lease !== "worker" && !(await leaseHeld(params.lock || "ui-job-processor"))
    ? servedFrom(files, () => loadPyodide(options)).then(preinstall) : null;
  if (earlyStart) earlyStart.catch(() => {}); // reported when awaited below
  const { lockfile, lockfile_base: lockfileBase, bundle, params: pageParams, record } = await boot;
  if (pageParams) Object.assign(params, Object.fromEntries(new URLSearchParams(pageParams)));
  say("worker_booting");
  if (lockfile) Object.assign(options, { lockFileContents: lockfile, packageBaseUrl: lockfileBase || params.index });
  const started = earlyStart ? await earlyStart : { pyodide: await servedFrom(files, () => loadPyodide(options)), main: null };
  const pyodide = started.pyodide;
  // Debugging hook: the worker's Pyodide, for DevTools' worker console, scripts/bench.mjs
  // (wasm heap, live-proxy counts) and tests (a waiting worker has none). Nothing in pyjobq reads it.
  self.pyodide = pyodide;
  stage = "install";
  let main = started.main;
  // No bundle: the page heard worker_preinstalled with its own digest.
  if (main && (params.packages || !record || (bundle && pyodide.runPython(RECORD_DIGEST) !== record))) {
    main = null; // not the page's pyjobq: forget it, and import the page's below
    pyodide.runPython("import sys\nfor name in [m for m in sys.modules if m.split('.')[0] == 'pyjobq']: del sys.modules[name]");
  }
  if (!main) {
    if (params.packages) {
      await pyodide.loadPackage(JSON.parse(params.packages), { messageCallback: () => {}, errorCallback: (m) => console.error(m) });
    } else {
      pyodide.unpackArchive(bundle, "zip", { extractDir: BUNDLE_DIR });
      pyodide.runPython(`import sys\nsys.path.insert(0, ${JSON.stringify(BUNDLE_DIR)})`);
    }
    main = pyodide.pyimport("pyjobq.browser.worker_main");
  }
  stage = "start";
  self.onmessage = null;
  main.start(JSON.stringify(params), early.splice(0));
} catch (error) {
  // V8's stack starts with the error's own line; Firefox's and WebKit's hold the frames alone.
  const said = String(error);
  const stack = String((error && error.stack) || "");
  const message = stack.includes(said) ? stack : stack ? `${said}\n${stack}` : said;
  console.error(`pyjobq worker (${stage}): ${message}`);
  say("worker_error", { stage, message, refused });
  if (self.pyjobqReleaseLease) self.pyjobqReleaseLease();
}
