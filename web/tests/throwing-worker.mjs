// A worker script whose bootstrap throws at once: what a broken or tampered copy of pyjobq's
// worker script does (tests/e2e/worker_start.spec.js, configure(worker_url=...)).
throw new Error("this worker script is broken on purpose");
