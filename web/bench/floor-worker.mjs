// Raw-JS baselines that live in a worker (scripts/bench.mjs, web/bench/bench.mjs).
//   {cmd:"ping"}                       -> {pong:true}            (one worker round trip)
//   {cmd:"floor", db, n}               -> per job, serially: readwrite tx add; readwrite tx
//        get+put running; post {run:i} and wait for {result:i} from the page; readwrite tx
//        get+put done. Then {floorDone:true, ms}.
//   {cmd:"load", index}                -> bare loadPyodide, then {loaded:true, at}
import { openDb, record, txDone } from "./idb-schema.mjs";

let waiting = null;
self.onmessage = async (event) => {
  const msg = event.data;
  if (msg.cmd === "ping") { self.postMessage({ pong: true }); return; }
  if (msg.result !== undefined) { const w = waiting; waiting = null; w(); return; }
  if (msg.cmd === "floor") {
    const db = await openDb(msg.db);
    const t0 = performance.now();
    for (let i = 0; i < msg.n; i++) {
      const id = `floor-${i}`;
      let tx = db.transaction("jobs", "readwrite");
      tx.objectStore("jobs").add(record(id, "pending"));
      await txDone(tx);
      tx = db.transaction("jobs", "readwrite");
      const s1 = tx.objectStore("jobs");
      s1.get(id).onsuccess = (e) => { const r = e.target.result; r.status = "running"; delete r.next_retry_at; r.attempts = 1; s1.put(r); };
      await txDone(tx);
      await new Promise((resolve) => { waiting = resolve; self.postMessage({ run: i }); });
      tx = db.transaction("jobs", "readwrite");
      const s2 = tx.objectStore("jobs");
      s2.get(id).onsuccess = (e) => { const r = e.target.result; r.status = "done"; r.result = { ok: true }; s2.put(r); };
      await txDone(tx);
    }
    const ms = performance.now() - t0;
    db.close();
    self.postMessage({ floorDone: true, ms });
    return;
  }
  if (msg.cmd === "load") {
    const { loadPyodide } = await import(msg.index + "pyodide.mjs");
    await loadPyodide({ indexURL: msg.index });
    self.postMessage({ loaded: true, at: performance.timeOrigin + performance.now() });
  }
};
self.postMessage({ up: true });
