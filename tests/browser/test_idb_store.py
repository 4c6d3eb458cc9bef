"""The IndexedDB store in real Chromium: the same contract suite the memory store passes,
plus what only a real IndexedDB can get wrong (transactions that auto-commit)."""

from pathlib import Path

from pytest_pyodide import run_in_pyodide

CONTRACT = (Path(__file__).parent.parent / "store_contract.py").read_text()


def test_indexeddb_store_meets_the_contract(selenium):
    _contract_in_pyodide(selenium, CONTRACT)


@run_in_pyodide(packages=["pyjobq"])
async def _contract_in_pyodide(selenium, contract_source):
    import types

    from pyjobq.browser.idb import IndexedDBStore

    contract = types.ModuleType("store_contract")
    exec(compile(contract_source, "store_contract.py", "exec"), contract.__dict__)
    failures = []
    for n, check in enumerate(contract.CHECKS):
        store = IndexedDBStore(f"contract-{n}")
        try:
            await check(store)
        except Exception as exc:  # collect every broken clause, not just the first
            failures.append(f"{check.__name__}: {type(exc).__name__}: {exc}")
        finally:
            store.close()
    assert failures == [], "\n".join(failures)
    assert len(contract.CHECKS) >= 15


def test_contract_source_is_the_shared_suite():
    assert "CHECKS" in CONTRACT and "async def check_update_read_modify_write" in CONTRACT


@run_in_pyodide(packages=["pyjobq"])
async def test_read_modify_write_is_one_transaction(selenium):
    """Concurrent updates of one record each read what the other wrote: none is lost.

    Awaiting between a get and a put in one transaction would raise
    TransactionInactiveError (a Python await resumes in a later macrotask); the
    store chains the put from the get's success event instead.
    """
    import asyncio

    from pyjobq.browser.idb import IndexedDBStore
    from pyjobq.core.ports import Change
    from pyjobq.core.records import NewJob

    store = IndexedDBStore("rmw")
    record = NewJob(id="j", reconstructor="fetch",
                    params={"method": "POST", "path": "/x", "body": None}).to_record(1.0)
    await store.add([record])
    bump = lambda cur: cur.evolve(attempts=cur.attempts + 1)  # noqa: E731
    await asyncio.gather(*[store.update(Change("j", bump)) for _ in range(20)])
    assert (await store.get("j")).attempts == 20

    # A change that raises writes nothing and the error reaches the caller.
    def broken(cur):
        raise ValueError("no")

    try:
        await store.update(Change("j", broken))
    except ValueError as exc:
        assert str(exc) == "no"
    else:
        raise AssertionError("update swallowed the change's error")
    assert (await store.get("j")).attempts == 20
    store.close()


@run_in_pyodide(packages=["pyjobq"])
async def test_schema_and_indexes(selenium):
    import js

    from pyjobq.browser.idb import IndexedDBStore
    from pyjobq.core.records import NewJob

    store = IndexedDBStore("schema-check")
    await store.add([NewJob(id="a", reconstructor="fetch", params=None, group="g").to_record(5.0)])
    db = await store._open()
    assert db.version == 2  # the spec's version 1, by_key (keys that replace), schedules
    assert list(db.objectStoreNames) == ["jobs", "schedules"]
    assert db.transaction("schedules").objectStore("schedules").keyPath == "name"
    tx = db.transaction("jobs")
    jobs = tx.objectStore("jobs")
    assert jobs.keyPath == "id"
    assert sorted(jobs.indexNames) == ["by_group", "by_group_status", "by_key", "by_next_retry",
                                       "by_status"]
    assert list(jobs.index("by_group_status").keyPath) == ["group", "status"]
    assert jobs.index("by_next_retry").keyPath == "next_retry_at"
    assert jobs.index("by_key").keyPath == "key"
    assert await store.next_due_at() == 5.0
    store.close()
    assert js.indexedDB is not None


@run_in_pyodide(packages=["pyjobq"])
async def test_a_version_1_database_is_upgraded_in_place_keeping_its_records(selenium):
    """A database an older pyjobq made (the spec's version 1: four indexes) opened by this one:
    ``by_key`` is added, every record stays, and only keyed records are in the new index
    (a record with no key, or one stored before keys existed, is not)."""
    import asyncio

    import js
    from pyodide.ffi import create_proxy, to_js

    from pyjobq.browser.idb import IndexedDBStore
    from pyjobq.core.records import NewJob

    name = "upgrade-from-1"
    old = NewJob(id="old", reconstructor="fetch", params={"method": "PUT", "path": "/o",
                                                           "body": None}).to_record(1.0)
    stored = {k: v for k, v in old.to_dict().items() if k != "key"}  # as version 1 wrote it
    opened = asyncio.get_event_loop().create_future()
    request = js.indexedDB.open(name, 1)

    def upgrade(_event):
        jobs = request.result.createObjectStore(
            "jobs", to_js({"keyPath": "id"}, dict_converter=js.Object.fromEntries))
        for index, path in [("by_status", "status"), ("by_group", "group"),
                            ("by_group_status", ["group", "status"]),
                            ("by_next_retry", "next_retry_at")]:
            jobs.createIndex(index, to_js(path) if isinstance(path, list) else path)
        jobs.add(to_js(stored, dict_converter=js.Object.fromEntries))

    on_upgrade = create_proxy(upgrade)
    on_success = create_proxy(lambda _e: opened.set_result(request.result))
    request.onupgradeneeded, request.onsuccess = on_upgrade, on_success
    db = await opened
    db.close()
    on_upgrade.destroy()
    on_success.destroy()

    store = IndexedDBStore(name)
    assert await store.get("old") == old  # read back with key None
    keyed = NewJob(id="k1", reconstructor="fetch", params=None, key="doc").to_record(2.0)
    assert await store.add([keyed]) == []
    newer = NewJob(id="k2", reconstructor="fetch", params=None, key="doc").to_record(3.0)
    assert await store.add([newer]) == [keyed]
    assert [r.id for r in await store.all()] == ["old", "k2"]
    db = await store._open()
    assert db.version == 2
    jobs = db.transaction("jobs").objectStore("jobs")
    assert "by_key" in list(jobs.indexNames)
    count = asyncio.get_event_loop().create_future()
    counting = jobs.index("by_key").count()  # issued at once: the transaction is still active
    on_count = create_proxy(lambda _e: count.set_result(counting.result))
    counting.onsuccess = on_count
    assert await count == 1  # k2 alone: "old" has no key
    on_count.destroy()
    store.close()


@run_in_pyodide(packages=["pyjobq"])
async def test_malformed_records_are_failed_in_one_write_keeping_the_raw_value(selenium):
    """A value in the store with missing or mistyped fields is failed with a clear error
    (code ``malformed_record``), its raw value kept under ``_params``; reads and the pass's
    look at unfinished work carry on with the valid records (docs/bad-input.md)."""
    import js
    from pyodide.ffi import to_js

    from pyjobq.browser.idb import IndexedDBStore
    from pyjobq.core.ports import Change
    from pyjobq.core.records import MALFORMED, NewJob

    store = IndexedDBStore("malformed")
    good = NewJob(id="good", reconstructor="fetch",
                  params={"method": "POST", "path": "/x", "body": 1}).to_record(1.0)
    await store.add([good])
    db = await store._open()
    tx = db.transaction("jobs", "readwrite")
    raw = [
        {"id": "no-type", "status": "pending", "next_retry_at": 0.5, "created_at": 1.0,
         "_params": {"keep": "me"}},
        {"id": "bad-attempts", "type": "t", "status": "pending", "attempts": "two",
         "max_attempts": 5, "created_at": 2.0, "updated_at": 2.0, "_reconstructor": "fetch",
         "_params": None, "next_retry_at": 0.7},
        {"id": 42, "type": "t", "status": "weird", "next_retry_at": 0.6},
        {"id": "no-status", "type": "t", "created_at": 3.0},
    ]
    for value in raw:
        tx.objectStore("jobs").put(to_js(value, dict_converter=js.Object.fromEntries))
    done = js.Promise.new(
        lambda resolve, reject: setattr(tx, "oncomplete", lambda _e: resolve(None)))
    await done

    entries = await store.entries()  # the scheduler's look at unfinished work: it runs on
    # "good" is read field by field; "no-type" and "bad-attempts" (pending, but not records a
    # pass could run) are decoded whole, failed by that same look, and left out of it.
    assert [e.id for e in entries] == ["good"]
    for job_id in ("no-type", "bad-attempts"):
        failed = await store.get(job_id)
        assert failed is not None and failed.status.value == "failed", job_id
        assert failed.code == MALFORMED and "malformed job record" in failed.error
    assert (await store.get("no-type"))._params["_params"] == {"keep": "me"}
    # The ones with no unfinished status are not in the look: the next read that meets them
    # fails them.
    everything = {r.id: r for r in await store.all()}
    assert set(everything) >= {"good"}
    after = {r.id: r for r in await store.all()}
    for job_id in ("42", "no-status"):
        failed = await store.get(job_id)
        assert failed is not None and failed.status.value == "failed", job_id
        assert failed.code == MALFORMED and "malformed job record" in failed.error
    assert (await store.get("42"))._params["id"] == 42
    assert after["no-status"].status.value == "failed"
    assert after["no-status"]._params["created_at"] == 3.0
    assert after["good"].status.value == "pending"
    # An update that meets a malformed value fails it in its own transaction, change not applied.
    tx = db.transaction("jobs", "readwrite")
    tx.objectStore("jobs").put(to_js({"id": "late", "status": "running"},
                                     dict_converter=js.Object.fromEntries))
    await js.Promise.new(
        lambda resolve, reject: setattr(tx, "oncomplete", lambda _e: resolve(None)))
    updated = (await store.update(Change("late", lambda cur: cur.evolve(attempts=9)))).record
    assert updated.status.value == "failed" and updated.attempts == 0
    assert (await store.get("late")).code == MALFORMED
    store.close()


@run_in_pyodide(packages=["pyjobq"])
async def test_non_finite_and_deep_records_fail_alone_in_indexeddb(selenium):
    """IndexedDB keeps NaN, ±Infinity and values nested thousands deep; each such record is
    failed alone (``malformed_record``) and every read carries on. A newer pyjobq's status is
    left exactly as it is, and unknown fields survive a read-modify-write."""
    import js
    from pyodide.ffi import to_js

    from pyjobq.browser.idb import IndexedDBStore
    from pyjobq.core.ports import Change
    from pyjobq.core.records import MALFORMED, NewJob

    def obj(value):
        return to_js(value, dict_converter=js.Object.fromEntries)

    store = IndexedDBStore("non-finite")
    good = NewJob(id="good", reconstructor="fetch",
                  params={"method": "POST", "path": "/x", "body": 1}).to_record(1.0)
    await store.add([good])
    db = await store._open()
    base = dict(type="t", status="pending", attempts=0, max_attempts=5, created_at=2.0,
                updated_at=2.0, _reconstructor="fetch", _params=None, next_retry_at=0.5)
    bad = {"nan": {"attempts": float("nan")}, "inf": {"max_attempts": float("inf")},
           "neg": {"attempts": -3, "max_attempts": 1}, "never": {"next_retry_at": float("inf")},
           "early": {"created_at": float("-inf")}}
    tx = db.transaction("jobs", "readwrite")
    jobs = tx.objectStore("jobs")
    for job_id, changes in bad.items():
        jobs.put(obj({**base, "id": job_id, **changes}))
    deep = obj({**base, "id": "deep"})
    deep._params = js.Function.new(
        "n", "let v = 'leaf'; for (let i = 0; i < n; i++) v = [v]; return v;")(1200)
    jobs.put(deep)
    jobs.put(obj({**base, "id": "newer", "status": "snoozed", "v3": {"by": "pyjobq 3"}}))
    jobs.put(obj({**base, "id": "extra", "v3_meta": {"a": 1}}))
    await js.Promise.new(
        lambda resolve, reject: setattr(tx, "oncomplete", lambda _e: resolve(None)))

    assert await store.next_due_at() == 0.5  # +Infinity is never a moment to wake at
    ids = [e.id for e in await store.entries()]  # the scheduler's look: it runs on
    assert "good" in ids and "newer" not in ids
    records = {r.id: r for r in await store.all()}
    for job_id in (*bad, "deep"):
        assert records[job_id].status.value == "failed", job_id
        assert records[job_id].code == MALFORMED, job_id
    assert records["good"].status.value == "pending" and "newer" not in records
    updated = (await store.update(Change("extra", lambda cur: cur.evolve(attempts=1)))).record
    assert updated.attempts == 1

    tx = db.transaction("jobs", "readonly")
    raw = {}
    for job_id in ("newer", "extra"):
        request = tx.objectStore("jobs").get(job_id)
        request.onsuccess = (
            lambda k, r: lambda _e: raw.__setitem__(k, r.result.to_py()))(job_id, request)
    await js.Promise.new(
        lambda resolve, reject: setattr(tx, "oncomplete", lambda _e: resolve(None)))
    assert raw["newer"]["status"] == "snoozed" and raw["newer"]["v3"] == {"by": "pyjobq 3"}
    assert raw["extra"]["v3_meta"] == {"a": 1} and raw["extra"]["attempts"] == 1
    store.close()


@run_in_pyodide(packages=["pyjobq"])
async def test_failing_a_malformed_value_keeps_what_was_written_after_the_read(selenium):
    """A read that meets a malformed value fails it in a second, readwrite transaction. A put
    or a delete made after the read commits before that write (IndexedDB runs one store's
    transactions in the order they were made): the write reads the value again and fails it
    only if it still is malformed, so neither the valid record is overwritten with the failed
    form nor the deleted one brought back."""
    import asyncio

    import js
    from pyodide.ffi import to_js

    from pyjobq.browser.idb import IndexedDBStore
    from pyjobq.core.records import MALFORMED, NewJob

    store = IndexedDBStore("malformed-race")
    good = NewJob(id="m", reconstructor="fetch",
                  params={"method": "POST", "path": "/m", "body": 1}).to_record(1.0)
    await store.add([NewJob(id="other", reconstructor="fetch", params=None).to_record(0.5)])
    db = await store._open()

    async def put(value):
        # Another writer's put, in a transaction of its own made now (before the read's second).
        tx = db.transaction("jobs", "readwrite")
        tx.objectStore("jobs").put(to_js(value, dict_converter=js.Object.fromEntries))
        await js.Promise.new(
            lambda resolve, reject: setattr(tx, "oncomplete", lambda _e: resolve(None)))

    async def put_malformed():
        await put({"id": "m", "status": "pending", "created_at": 1.0})

    await put_malformed()
    seen, _ = await asyncio.gather(store.get("m"), put(good.to_dict()))
    assert seen.code == MALFORMED  # what the read met, failed
    assert await store.get("m") == good  # the put made after the read is kept

    await put_malformed()
    seen, deleted = await asyncio.gather(store.get("m"), store.delete_many(["m"]))
    assert seen.code == MALFORMED and [r.id for r in deleted] == ["m"]
    assert await store.get("m") is None  # the delete made after the read is kept


@run_in_pyodide(packages=["pyjobq"])
async def test_next_due_at_skips_what_no_pass_could_claim_in_indexeddb(selenium):
    """The by_next_retry index holds every record with a next_retry_at key, whatever its status:
    a done or foreign record's, or -Infinity, sorts first. next_due_at steps over them to the
    soonest pending record, as the memory stores do (else a wake in the past fires again
    and again)."""
    import js
    from pyodide.ffi import to_js

    from pyjobq.browser.idb import IndexedDBStore
    from pyjobq.core.records import NewJob

    def obj(value):
        return to_js(value, dict_converter=js.Object.fromEntries)

    store = IndexedDBStore("next-due")
    good = NewJob(id="good", reconstructor="fetch", params=None).to_record(5.0)
    await store.add([good])
    db = await store._open()
    base = dict(type="t", status="pending", attempts=0, max_attempts=5, created_at=2.0,
                updated_at=2.0, _reconstructor="fetch", _params=None)
    tx = db.transaction("jobs", "readwrite")
    jobs = tx.objectStore("jobs")
    jobs.put(obj({**base, "id": "newer", "status": "snoozed", "next_retry_at": 0.1}))
    jobs.put(obj({**base, "id": "done", "status": "done", "next_retry_at": 0.2}))
    jobs.put(obj({**base, "id": "minus", "next_retry_at": float("-inf")}))
    jobs.put(obj({**base, "id": "plus", "next_retry_at": float("inf")}))
    jobs.put(obj({**base, "id": "text", "next_retry_at": "soon"}))
    await js.Promise.new(
        lambda resolve, reject: setattr(tx, "oncomplete", lambda _e: resolve(None)))

    assert await store.next_due_at() == 5.0
    assert await store.next_due_at(after=0.15) == 5.0
    assert await store.next_due_at(after=5.0) is None
    store.close()


@run_in_pyodide(packages=["pyjobq"])
async def test_the_settles_json_read_decodes_each_value_as_the_value_itself(selenium):
    """``update_many`` reads records through JSON text written in JavaScript (idb_batch.js:
    plain JSON values only); any other value is read as itself. Each value below decodes the
    same both ways — through ``update_many`` and through ``get``, which reads the value — a
    valid one to the same record, a malformed one failed with the same code. A Date taken for
    JSON would be a string, NaN a None, a BigInt an error: each would differ."""
    import js
    from pyodide.code import run_js
    from pyodide.ffi import to_js

    from pyjobq.browser.idb import IndexedDBStore
    from pyjobq.core.ports import Change
    from pyjobq.core.records import NewJob

    store = IndexedDBStore("json-read")
    base = NewJob(id="base", reconstructor="fetch",
                  params={"method": "POST", "path": "/x", "body": None}).to_record(1.0)
    make = run_js("""(base) => {
      const b = (id, extra) => Object.assign(Object.assign({}, base), { id }, extra);
      let deep = {}; const root = deep;
      for (let i = 0; i < 150; i++) { deep.d = {}; deep = deep.d; }
      return [
        b("plain", { _params: { body: { a: [1, null, "x{[", true, 2.5] } } }),
        b("null-group", { group: null, label: undefined }),
        b("date", { _params: { when: new Date(0) } }),
        b("nan", { next_retry_at: NaN }),
        b("infinite", { attempts: Infinity }),
        b("bigint", { _params: { n: 10n } }),
        b("deep", { _params: root }),
        b("brackets", { label: "[".repeat(200) }),
        b("array-hole", { _params: { list: [1, undefined, 3] } }),
      ];
    }""")
    values = make(to_js(base.to_dict(), dict_converter=js.Object.fromEntries))
    db = await store._open()
    tx = db.transaction("jobs", "readwrite")
    ids = []
    for value in values:
        ids.append(value.id)
        tx.objectStore("jobs").put(value)
        copy = js.Object.assign(js.Object.new(), value)
        copy.id = value.id + "-copy"
        tx.objectStore("jobs").put(copy)
    await js.Promise.new(
        lambda resolve, reject: setattr(tx, "oncomplete", lambda _e: resolve(None)))

    seen = {}

    def plain(value):
        """``value`` with each JavaScript object it holds (a Date) as its type and text: two
        proxies of equal Dates are not ==."""
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        if hasattr(value, "constructor"):
            return ("js", str(value.constructor.name), str(value))
        return value

    def look(cur):
        seen[cur.id] = cur
        return None  # nothing written: only what the read made of the value

    through_update = {job_id: (await store.update_many([Change(job_id, look)]))[0]
                      for job_id in ids}
    differ = []
    for job_id in ids:
        by_get = await store.get(job_id + "-copy")  # the value read as itself
        by_update = seen.get(job_id) or through_update[job_id].record
        assert by_get is not None and by_update is not None, job_id
        if by_get.status.value == "failed" and by_get.code == "malformed_record":
            same = by_update.status.value == "failed" and by_update.code == "malformed_record"
        else:
            left, right = plain(by_update.to_dict()), plain(by_get.to_dict())
            left.pop("id"), right.pop("id")
            same = left == right and job_id in seen
        if not same:
            differ.append((job_id, by_update, by_get))
    assert differ == []
    assert {j for j in ids if seen.get(j) is None} >= {"nan", "infinite", "deep"}
    assert seen["plain"]._params["body"] == {"a": [1, None, "x{[", True, 2.5]}
    assert seen["null-group"].group is None and seen["array-hole"]._params["list"] == [1, None, 3]
    assert seen["null-group"]._params == {"method": "POST", "path": "/x", "body": None}
    assert plain(seen["date"]._params["when"])[1] == "Date"  # read as itself, not as text
    store.close()


@run_in_pyodide(packages=["pyjobq"])
async def test_a_record_read_back_as_this_store_wrote_it_is_not_decoded_again(selenium):
    """The settle reads back the claim the store wrote one transaction before: read with
    exactly the JSON text of what was put, it is that record, not decoded and checked again.
    A record another writer changed meanwhile — even one field, even to what the same
    change would write — is decoded as ever: the trust is in the text, never in the id."""
    from pyodide.code import run_js

    from pyjobq.browser import idb
    from pyjobq.core.ports import Change
    from pyjobq.core.records import JobRecord, NewJob

    store = idb.IndexedDBStore("own-writes")
    await store.add([NewJob(id=i, reconstructor="fetch",
                            params={"method": "POST", "path": "/x", "body": {"n": 1}}
                            ).to_record(1.0) for i in ("j", "k")])
    decoded = []
    from_dict = JobRecord.from_dict.__func__

    def counting(cls, data, **kw):
        decoded.append(data.get("id"))
        return from_dict(cls, data, **kw)

    JobRecord.from_dict = classmethod(counting)
    try:
        seen = []

        def bump(cur):
            seen.append(cur)
            return cur.evolve(attempts=cur.attempts + 1, label=f"try {cur.attempts + 1}")

        await store.update_many([Change("j", bump)])  # added, never read: decoded
        assert decoded == ["j"]
        await store.update_many([Change("j", bump)])  # read back as written: not decoded
        assert decoded == ["j"] and seen[1].attempts == 1 and seen[1].label == "try 1"
        written = seen[1]

        # Another writer (a page of another tab, raw) changes one field behind this store.
        db = await store._open()
        await run_js("""(db) => new Promise((resolve) => {
          const tx = db.transaction("jobs", "readwrite");
          const s = tx.objectStore("jobs");
          const r = s.get("j");
          r.onsuccess = () => { const v = r.result; v.label = "changed elsewhere"; s.put(v); };
          tx.oncomplete = () => resolve(null);
        })""")(db)
        await store.update_many([Change("j", bump)])
        assert decoded == ["j", "j"] and seen[2].label == "changed elsewhere"
        assert seen[2].attempts == 2 and seen[2] is not written

        # What this store wrote in that last transaction is trusted again when read back.
        await store.update_many([Change("j", bump)])
        assert decoded == ["j", "j"]
        last = (await store.get("j"))
        assert (last.attempts, last.label) == (4, "try 4")

        # A record deleted and added again by someone else is what is stored now, not the
        # one this store wrote under that id.
        await store.delete_many(["k"])
        await store.add([NewJob(id="k", reconstructor="fetch", params={"other": True}
                                ).to_record(5.0)])
        await store.update_many([Change("k", bump)])
        assert seen[-1]._params == {"other": True} and decoded[-1] == "k"

        # A finished record is not kept: read back by an update, it is decoded.
        from pyjobq.core.status import Status

        await store.update_many([Change("j", lambda cur: cur.evolve(status=Status.DONE))])
        count = len(decoded)
        await store.update_many([Change("j", lambda cur: None)])
        assert decoded[count:] == ["j"]
    finally:
        JobRecord.from_dict = classmethod(from_dict)
    store.close()


def test_the_store_meets_the_contract_where_a_policy_forbids_eval(selenium):
    """Under a Content-Security-Policy without 'unsafe-eval' ``idb_batch.js`` cannot be
    evaluated: the store issues each request from Python, and meets the same contract."""
    _contract_without_batches(selenium, CONTRACT)


@run_in_pyodide(packages=["pyjobq"])
async def _contract_without_batches(selenium, contract_source):
    import types

    from pyjobq.browser import idb

    with idb.BATCHES.refused():
        contract = types.ModuleType("store_contract")
        exec(compile(contract_source, "store_contract.py", "exec"), contract.__dict__)
        failures = []
        for n, check in enumerate(contract.CHECKS):
            store = idb.IndexedDBStore(f"contract-no-eval-{n}")
            try:
                await check(store)
            except Exception as exc:
                failures.append(f"{check.__name__}: {type(exc).__name__}: {exc}")
            finally:
                store.close()
        assert idb.BATCHES.get() is None
    assert failures == [], "\n".join(failures)


def test_indexeddb_store_meets_the_schedule_contract(selenium):
    _schedule_contract_in_pyodide(selenium, CONTRACT)


@run_in_pyodide(packages=["pyjobq"])
async def _schedule_contract_in_pyodide(selenium, contract_source):
    import types

    from pyjobq.browser.idb import IndexedDBStore

    contract = types.ModuleType("store_contract")
    exec(compile(contract_source, "store_contract.py", "exec"), contract.__dict__)
    failures = []
    for n, check in enumerate(contract.SCHEDULE_CHECKS):
        store = IndexedDBStore(f"schedule-contract-{n}")
        try:
            await check(store)
        except Exception as exc:  # collect every broken clause, not just the first
            failures.append(f"{check.__name__}: {type(exc).__name__}: {exc}")
        finally:
            store.close()
    assert failures == [], "\n".join(failures)
    assert len(contract.SCHEDULE_CHECKS) >= 6


@run_in_pyodide(packages=["pyjobq"])
async def test_a_version_1_database_upgrades_keeping_its_jobs(selenium):
    """A database made by the version-1 schema (jobs only) opens at version 2: the upgrade adds
    the schedules store and keeps every job."""
    import asyncio

    import js
    from pyodide.ffi import create_proxy, to_js

    from pyjobq.browser.idb import IndexedDBStore

    opened = asyncio.get_event_loop().create_future()
    request = js.indexedDB.open("v1-upgrade", 1)

    def upgrade(_event):
        store = request.result.createObjectStore("jobs", to_js({"keyPath": "id"},
                                                               dict_converter=js.Object.fromEntries))
        for name, path in (("by_status", "status"), ("by_group", "group"),
                           ("by_next_retry", "next_retry_at")):
            store.createIndex(name, path)
        store.createIndex("by_group_status", to_js(["group", "status"]))
        store.put(to_js({"id": "old", "type": "t", "status": "done", "attempts": 1,
                         "max_attempts": 5, "created_at": 1.0, "updated_at": 2.0,
                         "_reconstructor": "fetch", "_params": None},
                        dict_converter=js.Object.fromEntries))

    handlers = [create_proxy(upgrade), create_proxy(lambda _e: opened.set_result(request.result))]
    request.onupgradeneeded, request.onsuccess = handlers
    (await opened).close()
    for proxy in handlers:
        proxy.destroy()
    store = IndexedDBStore("v1-upgrade")
    try:
        assert [r.id for r in await store.all()] == ["old"]
        assert await store.schedules() == []
    finally:
        store.close()


@run_in_pyodide(packages=["pyjobq"])
async def test_a_helper_is_named_in_stack_traces(selenium):
    """A helper is evaluated with a ``sourceURL``: stack traces, DevTools and CPU profiles name
    pyjobq's file, not an anonymous script."""
    from pyodide.code import run_js

    from pyjobq.browser import idb

    # No database: the transaction cannot begin, and its end is called back at once, from
    # within the helper's own functions.
    stacks = run_js("[]")
    capture = run_js("(stacks) => (token, read, end) => { stacks.push(new Error('here').stack); }")
    idb.BATCHES.get().update(None, "jobs", [], 1, capture(stacks))
    assert stacks.length == 1
    assert "pyjobq/idb_batch.js" in stacks[0], stacks[0]
