// A Web Locks request in one call, for pyjobq/browser/ports.py (WebLocks). Python keeps every
// decision and the holder's coroutine; this only asks navigator.locks and holds the grant, so
// a request costs one call and the one long-lived callback proxy, instead of two proxies, a
// promise awaited from Python and a Promise made from Python each time.
//
// `request(...)` calls `callback(token, what, errorName, errorMessage)` back:
//   "granted"      the lock is held until `release(token)`;
//   "unavailable"  ifAvailable and the lock is taken (nothing held);
//   "ended"        the request finished (after the release, or after "unavailable");
//   "failed"       it was refused or taken away: the error's name (AbortError: stolen) and
//                  message — also when it was held, and then release(token) does nothing.
//
// Evaluated once (run_js): the value is the object of the two functions; nothing is global.
(() => {
  const releases = new Map();
  return {
    request(name, mode, ifAvailable, steal, token, callback) {
      let asked;
      try {
        asked = navigator.locks.request(name, { mode, ifAvailable, steal }, (lock) => {
          if (!lock) {
            callback(token, "unavailable");
            return undefined;
          }
          return new Promise((resolve) => {
            releases.set(token, resolve);
            callback(token, "granted");
          });
        });
      } catch (error) {
        asked = Promise.reject(error);
      }
      asked.then(
        () => { releases.delete(token); callback(token, "ended"); },
        (error) => {
          releases.delete(token);
          callback(token, "failed", (error && error.name) || "Error",
                   (error && error.message) || String(error));
        });
    },
    release(token) {
      const resolve = releases.get(token);
      if (resolve !== undefined) {
        releases.delete(token);
        resolve();
      }
    },
  };
})()
