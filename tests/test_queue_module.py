"""The public queue module on plain CPython (in-process scheduler on the memory adapters).

Each test runs in a fresh interpreter: importing pyjobq.queue reads the names for good.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
        timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_repr_html_shows_known_jobs_escaped() -> None:
    out = run_python("""
        import asyncio, pyjobq
        from pyjobq.testing import Response

        async def send(method, path, body):
            return Response(500 if path == "/bad" else 200,
                            {"code": "boom"} if path == "/bad" else {})

        pyjobq.configure(transport=send)
        from pyjobq import queue

        async def main():
            ok = queue.enqueue_fetch("POST", "/ok", label="<b>save</b>")
            bad = queue.enqueue_fetch("POST", "/bad", label="publish", max_attempts=1)
            await ok.done, await bad.done
            for _ in range(100):  # an end is shown once the store confirms it: a read away
                html = queue._repr_html_()
                if "failed" in html and "running" not in html:
                    break
                await asyncio.sleep(0.01)
            assert "&lt;b&gt;save&lt;/b&gt;" in html and "<b>save</b>" not in html, html
            assert "publish" in html and "failed" in html and "boom" in html, html
            await queue.delete_job(ok.id)
            for _ in range(100):
                if "save" not in queue._repr_html_():
                    break
                await asyncio.sleep(0.01)
            assert "save" not in queue._repr_html_()
            print("ok")

        asyncio.run(main())
    """)
    assert out.strip() == "ok"


def test_configure_after_the_queue_is_imported_with_other_names_raises_and_names_the_fix() -> None:
    out = run_python("""
        import pyjobq
        pyjobq.configure(db_name="app-jobs")
        from pyjobq import queue
        assert queue.settings.db_name == "app-jobs"
        for call in (lambda: pyjobq.configure(db_name="other"),
                     lambda: pyjobq.configure(channel_name="elsewhere"),  # a default, in use
                     lambda: pyjobq.configure(db_name="app-jobs", yields={"t": "lock"})):
            try:
                call()
            except pyjobq.ConfigurationError as exc:
                text = str(exc)
                assert "restart the kernel" in text and "app-jobs" in text, text
                assert "unreachable" in text and "nothing was changed" in text, text
                print("raised")
        assert pyjobq.config.settings().db_name == "app-jobs"
        assert pyjobq.config.settings().channel_name == "ui-jobs"
        assert dict(pyjobq.config.settings().yields) == {}
    """)
    assert out.split() == ["raised"] * 3


def test_configure_again_with_the_same_names_is_a_no_op_but_replaces_the_hooks() -> None:
    """A notebook's configure cell run twice: the same names change nothing; the
    transport and reconstructors given again replace the old ones, as set_transport and
    register_reconstructor would; a job filed after it goes through the new transport."""
    out = run_python("""
        import asyncio, pyjobq
        from pyjobq.testing import Response

        def cell(tag):  # the configure cell, as a user re-runs it
            async def send(method, path, body):
                return Response(200, {"sent_by": tag})

            def thumbs(params):
                async def run(signal):
                    return {"made_by": tag}
                return run

            pyjobq.configure(db_name="nb-jobs", lock_name="nb-lock", channel_name="nb-jobs",
                             transport=send, reconstructors={"thumbs": thumbs},
                             yields={"heavy": "fg"})
            from pyjobq import queue
            return queue

        async def main():
            queue = cell("first run")
            first = await queue.enqueue_fetch("POST", "/a").done
            queue = cell("second run")  # no error
            second = await queue.enqueue_fetch("POST", "/b").done
            made = await queue.enqueue_persistent("thumbs", {}).done
            print(first.result["sent_by"], "|", second.result["sent_by"], "|",
                  made.result["made_by"], "|", queue.settings.db_name,
                  pyjobq.config.settings().transport.__name__)

        asyncio.run(main())
    """)
    assert out.strip() == "first run | second run | second run | nb-jobs send"


def test_the_queue_registers_as_the_job_queue_service() -> None:
    out = run_python("""
        import asyncio
        from pyjobq import queue, services

        async def main():
            queue.wake()
            print(services.get("job-queue") is queue._side)

        asyncio.run(main())
    """)
    assert out.strip() == "True"


def test_the_notebook_view_keeps_unfinished_jobs_and_only_the_newest_finished_ones() -> None:
    out = run_python("""
        import asyncio, pyjobq
        from pyjobq.testing import Response

        async def send(method, path, body):
            return Response(200, {})

        pyjobq.configure(transport=send)
        from pyjobq import queue
        queue._known.keep_finished = 5

        async def main():
            waiting = queue.enqueue_fetch("POST", "/later", delay_ms=3_600_000, label="waits")
            for n in range(12):
                await queue.enqueue_fetch("POST", f"/n{n}", label=f"job {n}").done
            await asyncio.sleep(0.05)
            statuses = [r["status"] for r in queue._known.records.values()]
            labels = [r["label"] for r in queue._known.records.values()]
            assert statuses.count("done") == 5 and "pending" in statuses, statuses
            assert labels[-5:] == [f"job {n}" for n in range(7, 12)] and "waits" in labels, labels
            assert len(await queue.query_all()) == 13  # the store still holds every record
            assert len(queue._known.records) == 6
            print("ok")

        asyncio.run(main())
    """)
    assert out.strip() == "ok"


def test_after_stop_the_tab_still_processes_and_hears_its_own_updates_only() -> None:
    out = run_python("""
        import asyncio, pyjobq
        from pyjobq.testing import Response

        async def send(method, path, body):
            return Response(200, {"path": path})

        pyjobq.configure(transport=send)
        from pyjobq import queue
        from pyjobq.hosts import _shared_hub

        async def main():
            heard = []
            queue.on_update(lambda u: heard.append((u.id, u.status)))
            first = await queue.enqueue_fetch("POST", "/before").done
            queue.stop()
            # Still running: this tab's job is processed and its updates reach it over the link.
            job = queue.enqueue_fetch("POST", "/after")
            out = await asyncio.wait_for(job.done, 5)
            assert (first.status, out.status, out.result) == ("done", "done", {"path": "/after"})
            assert (job.id, "done") in heard
            # Another tab's news no longer reaches this one: its channel is closed.
            other = _shared_hub().channels.channel(queue.settings.channel_name)
            other.post({"v": 1, "type": "job-update", "source": "another-tab",
                        "jobs": [{"id": "elsewhere", "status": "done"}]})
            await asyncio.sleep(0.05)
            assert not any(job_id == "elsewhere" for job_id, _ in heard), heard
            print("ok")

        asyncio.run(main())
    """)
    assert out.strip() == "ok"


def test_housekeeping_calls_take_effect_in_call_order_and_refuse_a_wrong_typed_argument() -> None:
    """The debounce recipe through the module functions: the delete
    handed to ``create_task`` goes out at the call, before the next save is filed. A wrong-typed
    id, group or type raises at the call."""
    out = run_python("""
        import asyncio, pyjobq
        from pyjobq.testing import Response

        sent = []

        async def send(method, path, body):
            sent.append(body)
            return Response(200, {})

        pyjobq.configure(transport=send)
        from pyjobq import queue

        async def main():
            old = queue.enqueue_fetch("PUT", "/doc", {"v": 1}, group="doc", delay_ms=50)
            await old.stored
            deleting = asyncio.create_task(pyjobq.delete_group("doc"))
            new = pyjobq.enqueue_fetch("PUT", "/doc", {"v": 2}, group="doc", delay_ms=50)
            assert await deleting == 1
            assert (await asyncio.wait_for(new.done, 5)).status == "done"
            assert sent == [{"v": 2}], sent
            for call in (lambda: pyjobq.delete_job(123), lambda: pyjobq.job(42),
                         lambda: pyjobq.suspend_type(5), lambda: pyjobq.delete_group(None)):
                try:
                    call()
                except pyjobq.InvalidJobError as exc:
                    print(str(exc).split(":")[0])
            print("ok")

        asyncio.run(main())
    """)
    assert out.split() == ["delete_job(job_id)", "job(job_id)", "suspend_type(type)",
                           "delete_group(group)", "ok"]


def test_the_queue_module_offers_what_its_executors_call() -> None:
    """``queue.report_progress`` and ``queue.current_job_id``, as the README's examples call
    them, are the package's own."""
    out = run_python("""
        import pyjobq
        from pyjobq import queue
        assert queue.report_progress is pyjobq.report_progress
        assert queue.current_job_id is pyjobq.current_job_id
        print("ok")
    """)
    assert out.strip() == "ok"


def test_configure_again_registers_only_the_reconstructors_it_names() -> None:
    """A configure cell run again with one more reconstructor: a kind another cell replaced
    since (register_reconstructor) keeps its replacement."""
    out = run_python("""
        import asyncio, pyjobq

        def make(tag):
            def factory(params):
                async def run(signal):
                    return tag
                return run
            return factory

        pyjobq.configure(reconstructors={"thumbs": make("v1")})
        from pyjobq import queue

        async def main():
            queue.register_reconstructor("thumbs", make("v2"))  # a later cell's fix
            before = (await queue.enqueue_persistent("thumbs").done).result
            pyjobq.configure(reconstructors={"other": make("x")})  # the cell, one kind more
            after = (await queue.enqueue_persistent("thumbs").done).result
            other = (await queue.enqueue_persistent("other").done).result
            pyjobq.configure(reconstructors={"thumbs": make("v3")})  # named again: replaced
            again = (await queue.enqueue_persistent("thumbs").done).result
            print(before, after, other, again, sorted(pyjobq.config.settings().reconstructors))

        asyncio.run(main())
    """)
    assert out.strip() == "v2 v2 x v3 ['other', 'thumbs']", out


def test_a_name_given_twice_before_the_import_says_to_restart_the_kernel_or_reload() -> None:
    out = run_python("""
        import pyjobq
        pyjobq.configure(db_name="first")
        try:
            pyjobq.configure(db_name="second")
        except pyjobq.ConfigurationError as exc:
            print(exc)
    """)
    assert "db_name was already configured as 'first'" in out, out
    assert "reload the page" in out and "in a notebook, restart the kernel" in out, out
