"""The notebook table and ``job-update`` news, on CPython: news is any same-origin script's word
(anyone can post on the channel), so the table shows an end only once the store confirms it,
keeps no field of the wrong kind, and holds a bounded amount of what news alone told it. The
queue runs on the memory adapters; a forger posts on the origin's channel as another tab's
script would."""

from __future__ import annotations

from helpers import SLOW_TRANSPORT, main_runs, run_python

# The queue in a fresh interpreter, IPython's display faked (every drawing of every output
# kept), its transport SLOW_TRANSPORT's, and a forger: a script of the origin posting on the
# queue's channel.
QUEUE = """
    import asyncio, sys, types

    outputs = {}

    def display(obj, raw=False, display_id=None):
        key = f"display-{len(outputs)}"
        outputs[key] = [obj]

        class Handle:
            def update(self, obj, raw=False):
                outputs[key].append(obj)

        return Handle()

    ipython = types.ModuleType("IPython")
    ipython.display = types.ModuleType("IPython.display")
    ipython.display.display = display
    sys.modules["IPython"], sys.modules["IPython.display"] = ipython, ipython.display
""" + SLOW_TRANSPORT + """
    from pyjobq import notebook, queue
    from pyjobq.core import jobs_table
    from pyjobq.core.messages import make
    from pyjobq import hosts

    forger = hosts._shared_hub().channels.channel(queue.settings.channel_name)

    def forge(*jobs):
        forger.post(make("job-update", source="forger", jobs=list(jobs)))

    def drawn():
        return list(outputs.values())[-1][-1]

    async def wait_for(test, what):
        for _ in range(400):
            if outputs and test(drawn()):
                return drawn()
            await asyncio.sleep(0.025)
        raise AssertionError(f"never {what}: {drawn()['text/plain'] if outputs else None}")

    async def running(job):
        for _ in range(400):
            record = await queue.get_job(job.id)
            if record is not None and record["status"] == "running":
                return record
            await asyncio.sleep(0.01)
        raise AssertionError("the job never ran")
"""


def test_forged_news_of_an_end_never_shows_and_the_table_shows_the_store_s_truth() -> None:
    """A script posts that a running job is done (stamped in the future, so no later state
    looks newer), that it was deleted, and that jobs nobody filed ended: ten re-read periods
    later the table still shows what the store holds — the job running — and no drawing ever
    showed it done. When it really ends, the table shows that."""
    main_runs(QUEUE + """
    async def main():
        jobs_table.RECHECK_MS = 50
        job = queue.enqueue_fetch("POST", "/slow", type="sync", label="sync inbox")
        stored = await running(job)
        queue._ipython_display_()
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 1 running", "drawn")
        forge({**stored, "status": "done", "updated_at": stored["updated_at"] + 10**9,
               "result": None})
        forge({**stored, "deleted": True})
        forge({"id": "nobody-filed-this", "type": "sync", "status": "failed", "created_at": 1,
               "updated_at": 1, "attempts": 1, "max_attempts": 1, "error": "forged"})
        await asyncio.sleep(0.5)  # ten re-read periods
        every = [d["text/plain"] for d in list(outputs.values())[-1]]
        assert all("done" not in d and "failed" not in d for d in every), every
        assert drawn()["text/plain"] == "Background jobs: 1 running", drawn()
        assert str((await queue.get_job(job.id))["status"]) == "running"
        assert queue._known.records[job.id]["status"] == "running"
        assert "nobody-filed-this" not in queue._known.records
        gate.set()
        await job.done
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 1 done", "really done")
    """, timeout=120)


def test_a_row_of_wrong_typed_fields_neither_stops_the_table_nor_reaches_it() -> None:
    """News of a running job with ``created_at="2024-01-01"`` (beside rows dated by numbers),
    strs for its stamps, attempts and progress, then a list for its status: drawing never
    raises, the live table goes on redrawing what comes after, and the row keeps only the
    fields of the right kind (the store's stamps stay)."""
    main_runs(QUEUE + """
    async def main():
        for n in range(2):
            await queue.enqueue_fetch("POST", f"/a{n}", label=f"earlier {n}").done
        job = queue.enqueue_fetch("POST", "/slow", type="sync", label="sync inbox")
        stored = await running(job)
        queue._ipython_display_()
        await wait_for(lambda d: set(d["text/plain"].split(": ")[1].split(", "))
                       == {"1 running", "2 done"}, "drawn")
        forge({"id": job.id, "type": "sync", "status": "running", "label": "odd date",
               "created_at": "2024-01-01", "updated_at": "yesterday", "attempts": "two",
               "max_attempts": None, "progress": "half", "next_retry_at": float("nan")})
        forge({"id": job.id, "type": ["x"], "status": ["done"], "label": 7, "created_at": True})
        await wait_for(lambda d: "odd date" in d["text/html"], "the odd news drawn")
        html = queue._repr_html_()  # drawn at once: it sorts every row
        assert "odd date" in html and "earlier 0" in html, html
        row = queue._known.records[job.id]
        assert row["label"] == "odd date" and row["status"] == "running", row
        assert row["created_at"] == stored["created_at"], row
        assert row["updated_at"] == stored["updated_at"] and row["attempts"] == 1, row
        assert "progress" not in row and "next_retry_at" not in row, row
        later = queue.enqueue_fetch("POST", "/later", label="after the odd row")
        await later.done
        await wait_for(lambda d: "after the odd row" in d["text/html"]
                       and "3 done" in d["text/plain"], "drawn after the odd row")
        gate.set()
        await job.done
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 4 done", "every end")
    """, timeout=120)


def test_forged_news_with_many_random_ids_keeps_the_table_s_memory_bounded() -> None:
    """20,000 job-updates under ids nobody filed — unfinished ones and ends — while no table
    is shown: what the queue holds on news alone never exceeds MAX_UNCONFIRMED waiting reads
    and rows, the reads drop every forged row, and a real job is still listed."""
    out = run_python(QUEUE + """
    async def main():
        await queue.enqueue_fetch("POST", "/real", label="real job").done
        await queue.query_all()  # the store answered: the table is whole
        peak = 0

        def held(update):
            nonlocal peak
            peak = max(peak, len(queue._known.records))

        queue.on_update(held)  # after the queue's own listener: it sees what that one kept
        for batch in range(40):
            forge(*({"id": f"forged-{batch}-{n}", "type": "t", "created_at": n, "updated_at": n,
                     "status": "running" if n % 2 else "done", "attempts": 0,
                     "max_attempts": 5} for n in range(500)))
            await asyncio.sleep(0)
        limit = 1000  # jobs_table.MAX_UNCONFIRMED: waiting reads, and the batch being read
        assert peak <= 2 * limit + 1, (peak, limit)
        for _ in range(400):
            await asyncio.sleep(0.01)
            if not queue._known.due and queue._known.checking is None:
                break
        assert limit == jobs_table.MAX_UNCONFIRMED
        forged = [job_id for job_id in queue._known.records if job_id.startswith("forged-")]
        heard_only = queue._known.heard_only
        assert forged == [] and not heard_only, (len(forged), len(heard_only))
        assert [r["label"] for r in queue._known.records.values()] == ["real job"]
        html = queue._repr_html_()
        assert "real job" in html and "forged" not in html
        print("ok", peak)

    asyncio.run(main())
    """, timeout=120)
    assert out.strip().startswith("ok")


def test_what_bg_jobs_is_told_to_show_of_what_news_asked_about_is_the_store_s_word() -> None:
    """``read_for_table`` (the ``<bg-jobs>`` bridge's answer): a forged end of a running job
    answers the stored record, a forged end of a job nobody filed answers None, a done
    volatile job this tab ran keeps the news of its end, a forged one of another id does not,
    and a shown row the store says nothing new of is left out (its progress stays)."""
    import asyncio
    from typing import Any

    from pyjobq.core import jobs_table

    def rec(job_id: str, status: str, at: float, **kw: Any) -> dict[str, Any]:
        return {"id": job_id, "status": status, "updated_at": at, "created_at": 1, **kw}

    stored = {"run": rec("run", "running", 5, _params={"secret": 1}),
              "same": rec("same", "running", 3)}

    class Store:
        async def jobs(self, *, status: str | None = None) -> list[dict[str, Any]]:
            return [dict(r) for r in stored.values() if r["status"] == status]

        async def get_job(self, job_id: str) -> dict[str, Any] | None:
            return dict(stored[job_id]) if job_id in stored else None

    answer = asyncio.run(jobs_table.read_for_table(
        Store(),
        shown={"run": rec("run", "running", 10**12), "same": rec("same", "running", 3),
               "mine": rec("mine", "running", 2, volatile=True)},
        asked={"run": rec("run", "done", 10**12), "nobody": rec("nobody", "failed", 1),
               "mine": rec("mine", "done", 4, volatile=True),
               "theirs": rec("theirs", "done", 4, volatile=True)},
        volatile_here=lambda job_id: job_id == "mine"))
    assert answer == {"run": rec("run", "running", 5), "nobody": None,
                      "mine": rec("mine", "done", 4, volatile=True), "theirs": None}, answer
