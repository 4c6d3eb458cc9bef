"""What pyjobq's own CPython tests share beyond :mod:`pyjobq.testing`: a scripted transport
(:class:`Server`), the one-tab worlds most tests start from (:func:`one_tab`, :func:`serving`,
:func:`holding`), :func:`reconstructor`, :func:`checkpointing`, :func:`listed`, and for scripts
run in a fresh interpreter :func:`run_python`, :func:`main_runs` and :data:`SLOW_TRANSPORT`.
Import from here; don't copy them into a test file."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Awaitable, Callable

from pyjobq.abort import AbortSignal
from pyjobq.handle import Job
from pyjobq.testing import Response, Tab, World, record, settle


class Server:
    """A fake transport: answers from a script, or holds a call until released.

    Each call takes the next answer of ``answers`` (then ``200 {"ok": true}``): a
    :class:`~pyjobq.testing.Response`, an exception to raise, or ``"hold"`` — the call waits
    until :meth:`release`; a cancelled held call is listed in ``cancelled``.
    """

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, Any]] = []
        self.held: dict[str, asyncio.Future[Any]] = {}
        self.cancelled: list[str] = []

    async def __call__(self, method: str, path: str, body: Any) -> Any:
        self.calls.append((method, path, body))
        answer = self.answers.pop(0) if self.answers else Response(200, {"ok": True})
        if answer == "hold":
            self.held[path] = asyncio.get_running_loop().create_future()
            try:
                answer = await self.held[path]
            except asyncio.CancelledError:
                self.cancelled.append(path)
                raise
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def release(self, path: str, answer: Any = None) -> None:
        self.held.pop(path).set_result(
            answer if answer is not None else Response(200, {"ok": True}))

    @property
    def holding(self) -> list[str]:
        return sorted(p for p, f in self.held.items() if not f.done())

    @property
    def paths(self) -> list[str]:
        """The path of every call, in order."""
        return [c[1] for c in self.calls]


def one_tab(**options: Any) -> tuple[World, Tab]:
    """A new world with one tab; ``options`` go to :meth:`World.open_tab`."""
    world = World()
    return world, world.open_tab(**options)


def reconstructor(
    execute: Callable[[Any, AbortSignal], Awaitable[Any]],
) -> Callable[[Any], Callable[[AbortSignal], Awaitable[Any]]]:
    """A reconstructor whose executor, given a job's params, is ``execute(params, signal)``."""
    def factory(params: Any) -> Callable[[AbortSignal], Awaitable[Any]]:
        async def executor(signal: AbortSignal) -> Any:
            return await execute(params, signal)
        return executor
    return factory


def checkpointing(cleanup: asyncio.Event) -> Callable[[AbortSignal], Awaitable[None]]:
    """A volatile executor that heeds its signal: once aborted, it saves a checkpoint (waits
    for ``cleanup``) before it settles, aborted."""
    async def executor(signal: AbortSignal) -> None:
        signal.heeded = True
        await signal.wait()
        await cleanup.wait()  # saving a checkpoint before it settles
        signal.raise_if_aborted()
    return executor


def serving(*answers: Any, **options: Any) -> tuple[World, Server, Tab]:
    """A new world with one tab whose transport is ``Server(*answers)``; ``options`` go to
    :meth:`World.open_tab`."""
    world, server = World(), Server(*answers)
    return world, server, world.open_tab(transport=server, **options)


async def holding(path: str, **enqueue: Any) -> tuple[World, Server, Tab, Job]:
    """A one-tab world (``serving("hold")``) whose job ``POST path`` (``enqueue`` options) is
    on the wire now, held by the server."""
    world, server, tab = serving("hold")
    job = tab.side.enqueue_fetch("POST", path, **enqueue)
    await settle()
    return world, server, tab, job


def listed(job_id: str = "a1b2c3d4e5f6", **over: Any) -> dict[str, Any]:
    """A row as ``query_all`` lists it (a job table's input): a stored ``notes`` record's fields
    (label "save note", created at 1 s), then ``over`` (any key)."""
    base = record(job_id, type="notes", label="save note", created_at=1_000.0,
                  next_retry_at=None).to_dict()
    return {**base, **over}


ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, timeout: float = 60) -> str:
    """Runs ``code`` (dedented) in a fresh interpreter at the repository's root; returns what it
    printed, once it has exited without an error."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def main_runs(script: str, timeout: float = 60) -> None:
    """Runs ``script`` as :func:`run_python` does, then its ``async def main()`` to its end."""
    out = run_python(script + """
    asyncio.run(main())
    print("ok")
    """, timeout)
    assert out.strip() == "ok"


#: Lines of a script run in a fresh interpreter (indented as the notebook tests write theirs):
#: pyjobq configured with a transport that answers every request at once but ``/slow``, which
#: it holds until ``gate`` is set.
SLOW_TRANSPORT = """
    import asyncio, pyjobq
    from pyjobq.testing import Response

    gate = asyncio.Event()

    async def send(method, path, body):
        if path == "/slow":
            await gate.wait()
        return Response(200, {})

    pyjobq.configure(transport=send)
"""
