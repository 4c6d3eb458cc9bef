// One IndexedDB transaction in one call, for pyjobq/browser/idb.py (IndexedDBStore.update_many
// and add). The decisions stay in Python: this only issues the requests Python decided, so a
// transaction costs one call and one Python callback instead of a proxy per request.
//
// Both functions call `callback(token, read, end)` back, synchronously, in the transaction's
// own events (the argument not given is undefined, which Python reads as None): with what was
// read (update only; its answer is what to write), and once at its end, with {ok: true} when
// it committed (an update's also with `written`: the JSON text of each value it put) or
// {ok: false, name, message} when it failed or was aborted (the first reason wins). So Python
// goes on in the event that ends the transaction.
//
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
    tx.oncomplete = () => end({ ok: true, written: tx.pyjobqWritten });
    // A request's error bubbles here before the transaction has its own .error set.
    tx.onerror = (event) => failed((event.target && event.target.error) || tx.error, "failed");
    tx.onabort = () => failed(tx.error, "aborted");
    tx.pyjobqFailed = (error, fallback) => {
      failed(error, fallback);
      try { tx.abort(); } catch { /* already finished */ }
    };
    return tx;
  }

  /** `value`'s JSON text when it holds only what JSON holds — strings, finite numbers,
   *  booleans, null, undefined (Python's None), arrays and plain objects — so that Python
   *  reading the text reads the value as to_py would; "" otherwise (a Date, NaN, a BigInt, a
   *  cycle...): Python then reads the value itself, and fails it if it is no record. */
  function plainJson(value) {
    try {
      return JSON.stringify(value, function (key, converted) {
        const original = this[key];
        switch (typeof original) {
          case "string":
          case "boolean":
            return converted;
          case "undefined": // Python's None, as to_js writes it: kept, as null (to_py: None)
            return null;
          case "number":
            if (Number.isFinite(original)) return converted;
            break;
          case "object": {
            if (original === null || Array.isArray(original)) return converted;
            const proto = Object.getPrototypeOf(original);
            if (proto === Object.prototype || proto === null) return converted;
            break;
          }
          default:
            break;
        }
        throw new TypeError("not plain JSON");
      });
    } catch {
      return "";
    }
  }

  return {
    /** Read `keys` (every request issued at once), then call back once, in the last read's
     *  success event while the transaction is active, with {values, texts}: each value read
     *  (undefined: none) and its JSON text (plainJson; undefined: none). The answer is
     *  {del: [key, ...], put: [value, ...], keep: [index, ...]} (deletes first, then puts, in
     *  order; `keep`: the puts whose JSON text the end reports, in `written`), or null to
     *  abort (Python keeps its own reason). */
    update(db, storeName, keys, token, callback) {
      const tx = begin(db, storeName, token, callback);
      if (!tx) return;
      const store = tx.objectStore(storeName);
      const read = { values: new Array(keys.length), texts: new Array(keys.length) };
      let left = keys.length;
      keys.forEach((key, i) => {
        const request = store.get(key);
        request.onsuccess = () => {
          read.values[i] = request.result;
          read.texts[i] = request.result === undefined ? undefined : plainJson(request.result);
          if (--left > 0) return;
          let writes = null;
          try {
            writes = callback(token, read, undefined);
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
            // What was put, as the same JSON text a read makes, for the puts Python keeps
            // (writes.keep; "" for the others): Python takes a record read back with exactly
            // that text as the one it wrote (idb.py, _OwnWrites).
            const texts = writes.put.map(() => "");
            for (const i of writes.keep || []) texts[i] = plainJson(writes.put[i]);
            tx.pyjobqWritten = texts;
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
