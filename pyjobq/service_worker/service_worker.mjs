// pyjobq's Service Worker: drains the queue when every tab of the origin is closed.
// Written out by `python -m pyjobq.service_worker --index <Pyodide folder> > sw.mjs`, which
// writes that folder into the two imports and INDEX below; registered by the page's queue as a *module* Service Worker
// (configure(service_worker="/sw.mjs")). An app with its own Service Worker imports this
// file's part instead: `import { pyjobqServiceWorker } from "./pyjobq-sw.mjs"` and calls
// `pyjobqServiceWorker(self)` once at its top level (docs/service-worker.md).
//
// A Service Worker may not use dynamic import(), so Pyodide's module factory is imported
// statically and handed to loadPyodide (Pyodide's docs/usage/service-worker.md); no top-level
// await either: Pyodide loads inside the event's waitUntil, once per Service Worker life.
//
// What it does, and nothing more (the engine is Python: pyjobq.service_worker.worker):
// - on `sync` with a tag "pyjobq:<db>" (the page registers one when a persistent job is stored
//   or fails offline), and on a page's {pyjobq_sw: "drain", db} message: loads Pyodide and
//   the pyjobq files the page left in Cache Storage, and drains that queue — only if no page
//   holds the processor lease, stopping for a page that asks for it, and before the browser's
//   limit on the event. Jobs left make the event's promise reject, so the browser fires it
//   again later (Background Sync retries).
// - where Background Sync is refused (no SyncManager, or its permission denied), it drains
//   once each time it starts, as Workbox's background sync does.
import createPyodideModule from "PYODIDE_INDEXpyodide.asm.mjs";
import { loadPyodide } from "PYODIDE_INDEXpyodide.mjs";

const INDEX = new URL("PYODIDE_INDEX", self.location.href).href;
const CACHE = "pyjobq-service-worker";
const TAG = "pyjobq:";
// The browser ends a sync event after about 3 minutes: from the event's start, stop claiming
// after 120 s (booting Pyodide counts), and give what still runs 20 s more (sw_drain.GRACE_MS).
const BUDGET_MS = 120_000;

export function pyjobqServiceWorker(scope) {
  let loading = null;

  /** Pyodide with pyjobq and the app's transport package, from what a page left (or null). */
  function boot(db) {
    loading ||= (async () => {
      const cache = await caches.open(CACHE);
      const bundle = await cache.match(new URL(`/__pyjobq-sw/${encodeURIComponent(db)}/bundle.zip`, scope.location.origin));
      if (!bundle) return null;
      const pyodide = await loadPyodide({ indexURL: INDEX, createPyodideModule });
      pyodide.unpackArchive(await bundle.arrayBuffer(), "zip", { extractDir: "/lib/pyjobq-sw" });
      pyodide.runPython('import sys\nsys.path.insert(0, "/lib/pyjobq-sw")');
      return pyodide;
    })();
    loading.catch(() => { loading = null; }); // a failed boot is tried again on the next event
    return loading;
  }

  async function drain(db) {
    const started = Date.now();
    const cache = await caches.open(CACHE);
    const config = await cache.match(new URL(`/__pyjobq-sw/${encodeURIComponent(db)}/config.json`, scope.location.origin));
    if (!config) return 0; // no page configured this queue with a Service Worker
    const pyodide = await boot(db);
    if (!pyodide) return 0;
    const main = pyodide.pyimport("pyjobq.service_worker.worker");
    const report = JSON.parse(await main.drain(await config.text(), Math.max(0, BUDGET_MS - (Date.now() - started))));
    // For DevTools' console (and tests): how each drain of this Service Worker's life went.
    (scope.pyjobqDrains ||= []).push({ db, at: Date.now(), ...report });
    return report.left;
  }

  /** drain(), with a failure said on the console and kept in pyjobqDrains. Jobs that are due
   *  and were not run make the event fail, so the browser fires the sync again later (not on
   *  its last chance: a page that opens, or the next sync a page registers, takes them). */
  async function said(db, lastChance) {
    let left;
    try {
      left = await drain(db);
    } catch (error) {
      // V8's stack starts with the error's own line; Firefox's and WebKit's hold the frames alone.
      const said = String(error);
      const stack = String((error && error.stack) || "");
      const message = stack.includes(said) ? stack : stack ? `${said}\n${stack}` : said;
      (scope.pyjobqDrains ||= []).push({ db, at: Date.now(), error: message });
      console.warn(`pyjobq service worker: ${error}`);
      throw error;
    }
    if (left > 0 && !lastChance) throw new Error(`pyjobq: ${left} job(s) left for the next sync`);
  }

  scope.addEventListener("sync", (event) => {
    if (event.tag.startsWith(TAG)) event.waitUntil(said(event.tag.slice(TAG.length), event.lastChance));
  });
  scope.addEventListener("message", (event) => {
    const data = event.data;
    if (data && data.pyjobq_sw === "drain" && typeof data.db === "string") event.waitUntil(said(data.db, true));
  });

  // No Background Sync here (or refused): drain each queue a page configured, once per start.
  (async () => {
    let refused = !("sync" in scope.registration);
    if (!refused) {
      try {
        refused = (await navigator.permissions.query({ name: "background-sync" })).state === "denied";
      } catch {
        refused = false;
      }
    }
    if (!refused) return;
    const cache = await caches.open(CACHE);
    for (const request of await cache.keys()) {
      const match = new URL(request.url).pathname.match(/^\/__pyjobq-sw\/([^/]+)\/config\.json$/);
      if (match) await said(decodeURIComponent(match[1]), true).catch(() => {});
    }
  })();
}

// Standalone: take over at once (an app importing the part keeps its own install policy).
self.addEventListener("install", (event) => event.waitUntil(self.skipWaiting()));
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));
pyjobqServiceWorker(self);
