"""An Outbox on the IndexedDB store in real Chromium:
the same facade the memory-store tests drive."""

from pytest_pyodide import run_in_pyodide


@run_in_pyodide(packages=["pyjobq"])
async def test_outbox_on_indexeddb_processes_fifo_deletes_and_keeps_the_exhausted(selenium):
    import asyncio

    from pyjobq import Outbox, OutboxHandler
    from pyjobq.browser.idb import IndexedDBStore

    store = IndexedDBStore("outbox-idb")
    seen, exhausted = [], []

    async def process(entry):
        seen.append(entry.payload)
        if entry.payload == "bad":
            raise ValueError("refused")

    box = Outbox(store, {"send": OutboxHandler(process=process,
                                               on_exhausted=lambda e: exhausted.append(e.id))},
                 is_retryable_error=lambda err: not isinstance(err, ValueError), poll_interval_ms=0)
    box.start()
    jobs = [await box.enqueue("send", p) for p in ("a", "b", "bad")]
    for _ in range(200):
        if len(seen) == 3 and exhausted:
            break
        await asyncio.sleep(0.01)
    assert seen == ["a", "b", "bad"]
    assert exhausted == [jobs[2].id]
    assert [r.id for r in await store.all()] == [jobs[2].id]
    assert [e.payload for e in await box.list_failed()] == ["bad"]
    box.stop()
    store.close()
