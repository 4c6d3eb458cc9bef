// pyjobq's IndexedDB schema (pyjobq/browser/idb.py), restated in JS for the raw baselines
// and for seeding: database version 2, store "jobs" keyed on id, five indexes (the spec's four
// and by_key), and store "schedules" keyed on name (each created only if missing, as the
// upgrade step there does).
export const INDEXES = {
  by_status: "status",
  by_group: "group",
  by_group_status: ["group", "status"],
  by_next_retry: "next_retry_at",
  by_key: "key",
};

export function openDb(name) {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(name, 2);
    req.onupgradeneeded = () => {
      const db = req.result;
      const store = db.objectStoreNames.contains("jobs")
        ? req.transaction.objectStore("jobs") : db.createObjectStore("jobs", { keyPath: "id" });
      for (const [index, keyPath] of Object.entries(INDEXES)) {
        if (!store.indexNames.contains(index)) store.createIndex(index, keyPath);
      }
      if (!db.objectStoreNames.contains("schedules")) db.createObjectStore("schedules", { keyPath: "name" });
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

export function txDone(tx) {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

/** A record shaped like JobRecord.to_dict() after to_js (None fields are absent). */
export function record(id, status, { type = "bench", now = Date.now(), nextRetryAt } = {}) {
  const r = {
    id, type, status, attempts: status === "pending" ? 0 : 1, max_attempts: 5,
    created_at: now, updated_at: now, _reconstructor: "fetch",
    _params: { method: "POST", path: "/bench", body: { n: 1 } }, given_back: 0,
  };
  if (status === "pending") r.next_retry_at = nextRetryAt ?? now;
  if (status === "done") { r.result = { ok: true }; r.http_status = 200; }
  if (status === "failed") { r.error = "HTTPError: POST /bench answered 500"; r.http_status = 500; }
  return r;
}
