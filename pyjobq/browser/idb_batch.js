// One IndexedDB transaction in one call, for pyjobq/browser/idb.py (IndexedDBStore.update_many
// and add). The decisions stay in Python: this only issues the requests Python decided, so a
// transaction costs one call and one Python callback instead of a proxy per request.
//
// Both functions call `callback(token, values, end)` back, synchronously, in the transaction's
// own events (the argument not given is undefined, which Python reads as None): with the values
// read (update only; its answer is what to write), and once at its end, with {ok: true} when it
// committed or {ok: false, name, message} when it failed or was aborted (the first reason wins). So Python goes on in the event that ends the transaction.
// Evaluated once (run_js): the value is the object of the two functions; nothing is global.
(() => {
  /** A readwrite transaction whose end is called back once; null (and the end called back)
   *  when it cannot begin. `tx.pyjobqFailed(error, fallback)` ends it with that error, aborted. */
  function begin(db, storeName, token, callback) {
    let ended = false;
    const end = (result) => {
      if (!ended) {
        ended = true;
        callback(token, undefined, result);
      }
    };
    const failed = (error, fallback) => end({
      ok: false, name: (error && error.name) || "Error", message: (error && error.message) || fallback,
    });
    let tx;
    try {
      tx = db.transaction(storeName, "readwrite");
    } catch (error) {
      failed(error, "the transaction could not begin");
      return null;
    }
    tx.oncomplete = () => end({ ok: true });
    // A request's error bubbles here before the transaction has its own .error set.
    tx.onerror = (event) => failed((event.target && event.target.error) || tx.error, "failed");
    tx.onabort = () => failed(tx.error, "aborted");
    tx.pyjobqFailed = (error, fallback) => {
      failed(error, fallback);
      try { tx.abort(); } catch { /* already finished */ }
    };
    return tx;
  }

  return {
    /** Read `keys` (every request issued at once), then call back with the values, once, in the
     *  last read's success event while the transaction is active: the answer is
     *  {del: [key, ...], put: [value, ...]} (deletes first, then puts, in order), or null to
     *  abort (Python keeps its own reason). */
    update(db, storeName, keys, token, callback) {
      const tx = begin(db, storeName, token, callback);
      if (!tx) return;
      const store = tx.objectStore(storeName);
      const values = new Array(keys.length);
      let left = keys.length;
      keys.forEach((key, i) => {
        const request = store.get(key);
        request.onsuccess = () => {
          values[i] = request.result;
          if (--left > 0) return;
          let writes = null;
          try {
            writes = callback(token, values, undefined);
          } catch {
            writes = null; // Python answers null itself when it fails; this is a last guard
          }
          if (!writes) {
            tx.abort();
            return;
          }
          try {
            for (const key of writes.del) store.delete(key);
            for (const value of writes.put) store.put(value);
          } catch (error) {
            tx.pyjobqFailed(error, "a value could not be stored");
          }
        };
      });
    },

    /** Add every one of `values` (a record whose id is taken fails the whole transaction). */
    add(db, storeName, values, token, callback) {
      const tx = begin(db, storeName, token, callback);
      if (!tx) return;
      const store = tx.objectStore(storeName);
      try {
        for (const value of values) store.add(value);
      } catch (error) {
        tx.pyjobqFailed(error, "a value could not be stored"); // nothing of it is kept
      }
    },
  };
})()
