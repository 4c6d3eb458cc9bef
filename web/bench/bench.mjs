// Page-side pieces of the benchmark (scripts/bench.mjs drives them through window.bench):
// the raw-JS baselines, IndexedDB seeding, and the tracing of pyjobq's scheduler worker.
import { openDb, record, txDone } from "./idb-schema.mjs";

const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : NaN;
};
export const stats = (xs) => ({ n: xs.length, p50: quantile(xs, 0.5), p99: quantile(xs, 0.99) });

let floorWorker = null;
async function floor() {
  if (!floorWorker) {
    floorWorker = new Worker(new URL("./floor-worker.mjs", import.meta.url), { type: "module" });
    await new Promise((resolve) => { floorWorker.onmessage = (e) => e.data.up && resolve(); });
  }
  return floorWorker;
}

/** The raw-JS floor of one persistent job, n times serially: jobs/s. */
export async function floorJobs(n, db) {
  const w = await floor();
  await deleteDb(db);
  const done = new Promise((resolve) => {
    w.onmessage = (e) => {
      if (e.data.run !== undefined) w.postMessage({ result: e.data.run });
      else if (e.data.floorDone) resolve(e.data.ms);
    };
  });
  w.postMessage({ cmd: "floor", db, n });
  const ms = await done;
  await deleteDb(db);
  return { ms, jobs_per_s: (n / ms) * 1000 };
}

/** n serial worker round trips: latency percentiles in ms. */
export async function roundTrips(n) {
  const w = await floor();
  const times = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await new Promise((resolve) => { w.onmessage = () => resolve(); w.postMessage({ cmd: "ping" }); });
    times.push(performance.now() - t0);
  }
  return stats(times);
}

/** Put n pyjobq-shaped records in one readwrite transaction: ms until it completes. */
export async function rawPut(n, dbName) {
  await deleteDb(dbName);
  const db = await openDb(dbName);
  const now = Date.now();
  const t0 = performance.now();
  const tx = db.transaction("jobs", "readwrite");
  const store = tx.objectStore("jobs");
  for (let i = 0; i < n; i++) store.put(record(`raw-${i}`, "pending", { now }));
  await txDone(tx);
  const ms = performance.now() - t0;
  db.close();
  await deleteDb(dbName);
  return { ms };
}

/** Seed records directly (one transaction): `done` mostly, plus pending ones waiting an hour
 *  and a few failed, the way a long-lived queue looks. Returns the store's count after. */
export async function seed(dbName, { done = 0, pending = 0, failed = 0, prefix = "seed" }) {
  const db = await openDb(dbName);
  const now = Date.now();
  const tx = db.transaction("jobs", "readwrite");
  const store = tx.objectStore("jobs");
  for (let i = 0; i < done; i++) store.put(record(`${prefix}-d${i}`, "done", { now: now - 1000 }));
  for (let i = 0; i < pending; i++) store.put(record(`${prefix}-p${i}`, "pending", { now, nextRetryAt: now + 3_600_000 }));
  for (let i = 0; i < failed; i++) store.put(record(`${prefix}-f${i}`, "failed", { now }));
  await txDone(tx);
  const count = await new Promise((resolve) => {
    const r = db.transaction("jobs").objectStore("jobs").count();
    r.onsuccess = () => resolve(r.result);
  });
  db.close();
  return count;
}

export function deleteDb(name) {
  return new Promise((resolve) => {
    const r = indexedDB.deleteDatabase(name);
    r.onsuccess = r.onerror = r.onblocked = () => resolve();
  });
}

// ---------------------------------------------------------------- the scheduler worker, traced

const traced = [];

/** Wrap Worker so pyjobq's Blob-URL scheduler worker starts through traced-worker.mjs,
 *  which timestamps run / run_started / run_result and answers stats requests. */
export function traceSchedulerWorkers() {
  const Real = globalThis.Worker;
  const wrapper = new URL("./traced-worker.mjs", import.meta.url).href;
  globalThis.Worker = class extends Real {
    constructor(url, options) {
      const href = String(url);
      if (href.startsWith("blob:") && href.includes("#")) {
        const [blob, hash] = href.split("#");
        super(`${wrapper}#${hash}&bench_blob=${encodeURIComponent(blob)}`, options);
        traced.push(this);
      } else {
        super(url, options);
      }
    }
  };
}

/** Ask the (last) traced scheduler worker something; it answers on a MessagePort. */
export function ask(request) {
  const w = traced[traced.length - 1];
  if (!w) return Promise.reject(new Error("no scheduler worker started yet"));
  const { port1, port2 } = new MessageChannel();
  return new Promise((resolve) => {
    port1.onmessage = (e) => { port1.close(); resolve(e.data); };
    w.postMessage({ bench: request }, [port2]);
  });
}

/** Handshake latencies (ms, worker clock) of every run traced since the last clear, and where
 *  a serial lane's time goes: run -> run_started (handshake), run_started -> run_result (the
 *  page runs the job), run_result -> the next run (the scheduler settles, publishes, claims). */
export async function handshakes() {
  const { trace } = await ask({ cmd: "trace" });
  const sent = new Map();
  const started = new Map();
  const times = [], running = [], between = [];
  let lastResult = null;
  for (const [dir, type, id, t] of trace) {
    if (dir === "out" && type === "run") {
      sent.set(id, t);
      if (lastResult !== null) between.push(t - lastResult);
    } else if (dir === "in" && type === "run_started" && sent.has(id)) {
      times.push(t - sent.get(id)); sent.delete(id); started.set(id, t);
    } else if (dir === "in" && type === "run_result" && started.has(id)) {
      running.push(t - started.get(id)); started.delete(id); lastResult = t;
    }
  }
  return { ...stats(times), page_runs: stats(running), scheduler_between_runs: stats(between) };
}

/** Live-object figures of this page's Pyodide. */
export function pageMemory({ trackProxies = false } = {}) {
  const m = window.pyodide._module;
  if (trackProxies) { m.pyproxy_alloc_map.clear(); m.enable_pyproxy_allocation_tracing(); }
  return {
    wasm_heap: m.HEAP8.length,
    live_proxies: m.pyproxy_alloc_map.size,
    py_objects: window.pyodide.runPython("import gc; gc.collect(); len(gc.get_objects())"),
    js_heap: performance.memory ? performance.memory.usedJSHeapSize : null,
  };
}
