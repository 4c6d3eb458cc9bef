// Baseline of "sync event -> last job done" (scripts/bench.mjs, part sw): a raw-JS Service
// Worker doing the same requests as pyjobq's. On `sync` with the tag "raw" it reads every record
// of the IndexedDB database "raw-sw-bench" and POSTs each in turn, deleting it once answered:
// no Pyodide, no lease, no retry policy — the floor a drain cannot go under.
self.addEventListener("install", (event) => event.waitUntil(self.skipWaiting()));
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));
self.addEventListener("sync", (event) => { if (event.tag === "raw") event.waitUntil(drain()); });

const request = (r) => new Promise((resolve, reject) => { r.onsuccess = () => resolve(r.result); r.onerror = () => reject(r.error); });

async function drain() {
  const db = await request(indexedDB.open("raw-sw-bench", 1));
  const records = await request(db.transaction("jobs").objectStore("jobs").getAll());
  for (const record of records) {
    const response = await fetch(record.path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(record.body) });
    await response.text();
    await request(db.transaction("jobs", "readwrite").objectStore("jobs").delete(record.id));
  }
  db.close();
}
