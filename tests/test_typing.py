"""Every name reached through ``pyjobq`` is statically typed (mypy here; pyright reads the same).

The package loads the queue lazily (a module ``__getattr__``, so ``import pyjobq`` starts
nothing); that hook is hidden from type checkers, so a misspelt name is an error and not
``Any``. One mypy run checks small programs written as a user would, each in its own file.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pyjobq

ROOT = Path(__file__).resolve().parent.parent

PROGRAMS = {
    "typo": """
        import pyjobq
        pyjobq.enqueu_fetch("POST", "/x")
    """,
    "wrong_argument": """
        import pyjobq
        pyjobq.enqueue_fetch("POST", 3)
    """,
    "handle": """
        import asyncio
        import pyjobq

        async def main() -> None:
            job = pyjobq.enqueue_fetch("POST", "/x", {"n": 1})
            reveal_type(job)
            reveal_type(await job)
            reveal_type(await asyncio.wait_for(job.done, 1))
            reveal_type((await job).status)
            reveal_type(await job.stored)
            if (await job).status == pyjobq.Status.DONE:
                pass
    """,
    "updates": """
        import pyjobq

        def on(update: pyjobq.JobUpdate) -> None:
            reveal_type(update.status)

        unsubscribe = pyjobq.on_update(on)
        reveal_type(unsubscribe)
        reveal_type(pyjobq.current_job_id())
        reveal_type(pyjobq.Outbox)
    """,
    "housekeeping": """
        import asyncio
        import pyjobq

        async def main() -> None:
            reveal_type(pyjobq.delete_job)
            reveal_type(pyjobq.delete_group)
            reveal_type(pyjobq.cancel_job)
            reveal_type(pyjobq.retry_job)
            reveal_type(pyjobq.retry_all)
            reveal_type(pyjobq.cleanup_old)
            reveal_type(pyjobq.suspend_type)
            reveal_type(pyjobq.resume_type)
            reveal_type(pyjobq.query_all)
            reveal_type(asyncio.create_task(pyjobq.delete_group("doc")))
            reveal_type(await pyjobq.delete_job("x"))
    """,
    "task": """
        import pyjobq
        from pyjobq import AbortSignal

        @pyjobq.task(type="notes")
        async def save(signal: AbortSignal, doc_id: str, text: str, *,
                       draft: bool = False) -> dict[str, int]:
            return {}

        @pyjobq.task
        async def ping(signal: AbortSignal) -> None: ...

        async def main() -> None:
            job = save.enqueue("doc-1", "text")
            save.enqueue("doc-1", "text", draft=True)
            save.options(key="doc-1", delay_ms=500, group="doc-1").enqueue("doc-1", "text")
            ping.enqueue()
            reveal_type(save)
            reveal_type(save.enqueue)
            reveal_type(job)
            reveal_type(await job.result(timeout=1))
            reveal_type(await job.status())
            reveal_type(await job.cancel())
            reveal_type(pyjobq.jobs)
            try:
                await job.result()
            except pyjobq.JobFailed as failed:
                reveal_type(failed.outcome)
    """,
    "task_errors": """
        import pyjobq
        from pyjobq import AbortSignal

        @pyjobq.task
        async def save(signal: AbortSignal, doc_id: str, text: str, *,
                       draft: bool = False) -> None: ...

        save.enqueue("doc-1", 3)
        save.enqueue("doc-1")
        save.enqueue("doc-1", "text", colour="red")
        save.options(key=3).enqueue("doc-1", "text")
        save.options(keys="doc-1")

        @pyjobq.task
        async def no_signal(doc_id: str) -> None: ...
    """,
    "periodic": """
        from datetime import timedelta
        import pyjobq

        @pyjobq.periodic(every=timedelta(minutes=15))
        async def tidy(signal: pyjobq.AbortSignal) -> int:
            return 3

        async def main() -> None:
            reveal_type(tidy)
            reveal_type(await tidy(pyjobq.AbortSignal()))
            reveal_type(await pyjobq.unschedule(tidy.name))
            tidy(1)

        pyjobq.periodic(every=15)

        @pyjobq.periodic(every=timedelta(minutes=15))
        async def needs_more(signal: pyjobq.AbortSignal, doc_id: str) -> None: ...
    """,
    "every_name": "import pyjobq\n" + "".join(
        f"reveal_type(pyjobq.{name})\n" for name in pyjobq.__all__),
    # The narrow interfaces the parts of pyjobq talk through are each a true subset of the
    # executor side that is handed to them: a rename or a missing parameter there is an error.
    "subsets": """
        from pyjobq.executor.side import ExecutorSide
        from pyjobq.handle import JobControl
        from pyjobq.tasks import TaskQueue
        from pyjobq.tasks.periodic import _Queue

        def hand_out(side: ExecutorSide) -> tuple[JobControl, TaskQueue, _Queue]:
            return side, side, side
    """,
    "drifted": """
        from typing import Any
        from pyjobq.tasks import TaskQueue

        class NoKey:
            def enqueue_persistent(self, reconstructor: str, params: Any = None, *,
                                   type: str = "default") -> Any: ...
            def enqueue(self, executor: Any, *, id: str | None = None) -> Any: ...

        queue: TaskQueue = NoKey()
    """,
}


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    pytest.importorskip("mypy", reason="mypy is in requirements-dev.txt: make setup")
    where = tmp_path_factory.mktemp("typing")
    config = where / "mypy.ini"
    # Only the programs are judged here (`make typecheck` judges pyjobq itself, with
    # Pyodide's stubs).
    config.write_text("[mypy]\nstrict = True\n[mypy-pyjobq.*]\nfollow_imports = silent\n"
                      "[mypy-pyodide.*,js,pyodide_js]\nignore_missing_imports = True\n")
    files = []
    for name, code in PROGRAMS.items():
        path = where / f"{name}.py"
        path.write_text(textwrap.dedent(code))
        files.append(str(path))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir",
         str(where / "cache"), "--no-error-summary", "--hide-error-context", *files],
        cwd=ROOT, env={"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True, timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    out: dict[str, list[str]] = {name: [] for name in PROGRAMS}
    for line in done.stdout.splitlines():
        m = re.match(r".*[/\\](\w+)\.py:\d+: (.*)", line)
        assert m, line
        out[m.group(1)].append(m.group(2))
    return out


def test_a_misspelt_name_is_an_error(mypy_output: dict[str, list[str]]) -> None:
    assert mypy_output["typo"] == [
        'error: Module has no attribute "enqueu_fetch"; maybe "enqueue_fetch"?  [attr-defined]']


def test_arguments_are_checked(mypy_output: dict[str, list[str]]) -> None:
    [error] = mypy_output["wrong_argument"]
    assert 'Argument 2 to "enqueue_fetch" has incompatible type "int"; expected "str"' in error


def test_the_handle_and_its_outcome_are_typed(mypy_output: dict[str, list[str]]) -> None:
    assert mypy_output["handle"] == [
        'note: Revealed type is "pyjobq.handle.Job"',
        'note: Revealed type is "pyjobq.core.outcome.Outcome"',
        'note: Revealed type is "pyjobq.core.outcome.Outcome"',
        'note: Revealed type is "pyjobq.core.status.Status"',
        'note: Revealed type is "None"',
    ]


def test_updates_and_executor_helpers_are_typed(mypy_output: dict[str, list[str]]) -> None:
    status, unsubscribe, job_id, outbox = mypy_output["updates"]
    assert status == 'note: Revealed type is "pyjobq.core.status.Status"'
    assert unsubscribe == 'note: Revealed type is "def ()"'
    assert job_id == 'note: Revealed type is "str | None"'
    assert outbox.startswith('note: Revealed type is "def (store: pyjobq.core.ports.Store')
    assert outbox.endswith('-> pyjobq.outbox.Outbox"')


def test_housekeeping_calls_keep_their_async_signatures(mypy_output: dict[str, list[str]]) -> None:
    """They send their request at the call now and return the coroutine that waits for the reply:
    to a type checker they are the ``async def`` s they were."""
    coroutine = "def ({}) -> typing.Coroutine[Any, Any, {}]"
    assert mypy_output["housekeeping"] == [f'note: Revealed type is "{t}"' for t in [
        coroutine.format("job_id: str", "bool"),
        coroutine.format("group: str", "int"),
        coroutine.format("job_id: str", "bool"),
        coroutine.format("job_id: str", "bool"),
        coroutine.format("", "int"),
        coroutine.format("", "int"),
        coroutine.format("type: str", "None"),
        coroutine.format("type: str", "None"),
        coroutine.format("", "list[dict[str, Any]]"),
        "_asyncio.Task[int]",
        "bool",
    ]]


def test_every_public_name_resolves_statically(mypy_output: dict[str, list[str]]) -> None:
    notes = mypy_output["every_name"]
    assert len(notes) == len(pyjobq.__all__)
    assert [n for n in notes if not n.startswith("note: Revealed type is") or '"Any"' in n] == []


def test_what_type_checkers_see_is_what_the_package_hands_out() -> None:
    """The static view (TYPE_CHECKING imports) and the lazy one are the same objects, and
    ``import pyjobq`` still loads no queue. Fresh interpreter: reading the names imports it."""
    code = textwrap.dedent("""
        import sys, pyjobq
        assert "pyjobq.queue" not in sys.modules and "pyjobq.outbox" not in sys.modules
        from pyjobq import executor, handle, outbox, queue
        assert pyjobq.job is queue.job and callable(pyjobq.job)  # not the pyjobq.handle module
        assert pyjobq.enqueue_fetch is queue.enqueue_fetch and pyjobq.Job is handle.Job is queue.Job
        assert pyjobq.current_job_id is executor.current_job_id and pyjobq.Prune is outbox.Prune
        missing = [n for n in pyjobq.__all__ if getattr(pyjobq, n, None) is None]
        assert missing == [], missing
        try:
            pyjobq.enqueu_fetch
        except AttributeError as exc:
            assert "enqueu_fetch" in str(exc)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_a_tasks_enqueue_is_typed_by_its_function(mypy_output: dict[str, list[str]]) -> None:
    """``@pyjobq.task`` keeps the function's parameters after the signal: ``f.enqueue`` takes
    them, ``f.options(...)`` a call's own options; the handle's calls are typed."""
    assert mypy_output["task"] == [f'note: Revealed type is "{t}"' for t in [
        "pyjobq.tasks.Task[[doc_id: str, text: str, *, draft: bool "
        "=], dict[str, int]]",
        "def (doc_id: str, text: str, *, draft: bool =) -> "
        "pyjobq.handle.Job",
        "pyjobq.handle.Job",
        "Any",
        "pyjobq.core.status.Status | None",
        "bool",
        "def (*, status: str | None =, type: str | None =, group: "
        "str | None =) -> typing.Coroutine[Any, Any, list[dict["
        "str, Any]]]",
        "pyjobq.core.outcome.Outcome",
    ]]


def test_a_wrong_missing_or_unknown_task_argument_is_a_type_error(
        mypy_output: dict[str, list[str]]) -> None:
    errors = mypy_output["task_errors"]
    expected = [
        'Argument 2 to "enqueue" of "Task" has incompatible type "int"; expected "str"',
        'Missing positional argument "text" in call to "enqueue" of "Task"',
        'Unexpected keyword argument "colour" for "enqueue" of "Task"',
        'Argument "key" to "options" of "Task" has incompatible type "int"; expected "str | None"',
        'Unexpected keyword argument "keys" for "options" of "Task"',
        'Argument 1 to "task" has incompatible type',
    ]
    for message in expected:
        assert [e for e in errors if message in e], (message, errors)
    assert all(e.startswith(("error:", "note:")) for e in errors), errors
    assert len([e for e in errors if e.startswith("error:")]) == len(expected), errors
def test_a_periodic_function_keeps_its_signature(mypy_output: dict[str, list[str]]) -> None:
    reveal, result, unscheduled, wrong_signal, wrong_every, *more = mypy_output["periodic"]
    assert reveal == 'note: Revealed type is "pyjobq.tasks.periodic.Periodic[int]"'
    assert result == 'note: Revealed type is "int"'
    assert unscheduled == 'note: Revealed type is "bool"'
    assert ('Argument 1 to "__call__" of "Periodic" has incompatible type "int"; expected '
            '"AbortSignal"' in wrong_signal)
    assert 'Argument "every" to "periodic" has incompatible type "int"' in wrong_every
    assert len(more) == 1 and ('has incompatible type "Callable[[AbortSignal, str], Coroutine['
                               in more[0]), more


def test_each_narrow_interface_is_a_true_subset_of_the_executor_side(
        mypy_output: dict[str, list[str]]) -> None:
    assert mypy_output["subsets"] == []
    # The check can fail: a queue whose enqueue lacks key= and timeout_s= is not a TaskQueue.
    errors = [line for line in mypy_output["drifted"] if line.startswith("error:")]
    assert len(errors) == 1, mypy_output["drifted"]
    assert 'has type "NoKey", variable has type "TaskQueue"' in errors[0]
