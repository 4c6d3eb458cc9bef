"""Running user code: the executors of one engine's jobs, on the page that holds them.

A :class:`Runner` answers its engine's ``run`` with ``run_started`` (in the same event) and
then ``run_result``; ``abandon_run`` drops a run, ``abort_run`` aborts its signal. The
persistent engine's runner rebuilds each executor from its reconstructor and params; the
volatile engine's runs the closures ``enqueue`` was given, which live only in this tab
(spec: "Where jobs run"). Which of the two a runner is, is which table it was made with —
nothing here asks which engine a job belongs to.

Runs on the page only (its main thread, or a worker host such as a notebook kernel): user code
never runs in the scheduler worker.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..abort import AbortSignal
from ..core.codes import Code
from ..core.errors import InvalidJobError, LockStolen, OrphanedJobError, PyjobqError, Terminal
from ..core.messages import ABANDON_GRACE_MS, make
from ..core.ports import Clock, Link, LockManager, Timer
from ..core.records import check_json, wait_ms
from ..loop import start_now
from .current import RunProgress, _current_run
from .fetch import Answer, code_from_body

#: An executor: an async callable taking the job's abort signal.
Executor = Callable[[AbortSignal], Any]


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The fields of a failed ``run_result``: only these survive the closure
    (spec: "Where jobs run")."""
    status = getattr(exc, "status", None)
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    code = getattr(exc, "code", None)
    if not isinstance(code, str):
        code = code_from_body(getattr(exc, "body", None))
    message = str(exc) or type(exc).__name__
    return {
        "ok": False,
        "error": message if isinstance(exc, PyjobqError) else f"{type(exc).__name__}: {message}",
        "status": status,
        "code": code,
        "terminal": getattr(exc, "terminal", False) is True,
        "interrupted": getattr(exc, "interrupted", False) is True,
        "retry_after_ms": wait_ms(getattr(exc, "retry_after_ms", None)),
    }


@dataclass
class _Run:
    """A run this page has in hand, from ``run`` until its executor settled."""

    task: asyncio.Future[Any]
    signal: AbortSignal
    #: The scheduler's claim identifier, echoed in every answer.
    claim: str
    #: The run's progress reports, held back to one message per interval until its end.
    progress: RunProgress
    #: Dropped by the scheduler (``abandon_run``): its outcome is not stored, its end is confirmed.
    abandoned: bool = False
    #: The timer that cancels an abandoned run whose executor heeds its signal, after the grace.
    grace: Timer | None = None
    #: The timer of the job's timeout (``timeout_ms`` of its ``run``); None: no bound.
    deadline: Timer | None = None
    #: The timeout it ran out, in ms, once it did.
    timed_out: float | None = None


def _unasked(fields: dict[str, Any]) -> dict[str, Any]:
    """An ``Interrupted`` that nothing asked for (its signal was not aborted): an attempt that
    failed, counted and retried with backoff like any failure — given back, it would run again
    at once for ever, with no ceiling."""
    return {"interrupted": False, "code": Code.INTERRUPTED_UNASKED,
            "error": f"{fields['error']} (raised Interrupted while its signal was not aborted: "
                     "counted as a failed attempt)"}


def _claimed(fields: dict[str, Any], claim: str) -> dict[str, Any]:
    """An answer's fields with the claim it answers."""
    return {**fields, "claim": claim}


class Runner:
    """The runs of one engine's jobs on this page.

    Args:
        link: where the engine's ``run`` came from, and where every answer goes.
        clock: for the abandon grace.
        registry: reconstructor name → factory (``factory(params)`` returns the executor).
        closures: job id → executor, for jobs whose code lives only in this tab (volatile).
        locks, yields: the page's ``navigator.locks`` and job type → yield lock: a run of such
            a type holds its yield lock in shared mode (spec: "Yielding"). None: no yielding.
        is_online: ``navigator.onLine`` where the executor runs, read when an attempt fails.
        refusing: True while this page may not begin runs (it let the processor lease go,
            :mod:`pyjobq.engine.lease`): a ``run`` then is given back unspent.
    """

    def __init__(
        self,
        link: Link,
        *,
        clock: Clock,
        registry: Mapping[str, Callable[[Any], Executor]] | None = None,
        closures: dict[str, Executor] | None = None,
        locks: LockManager | None = None,
        yields: Mapping[str, str] | None = None,
        is_online: Callable[[], bool] | None = None,
        refusing: Callable[[], bool] | None = None,
        unknown_kind: Callable[[str, str], Callable[[Any], Executor] | None] | None = None,
    ) -> None:
        self.link = link
        #: The factory for a kind with no reconstructor here, given the kind and the job's type,
        #: or None: the job fails as orphaned (the Service Worker gives such a job back to the
        #: pages, and leaves its type to them: pyjobq/service_worker/drain.py).
        self._unknown_kind = unknown_kind
        self.clock = clock
        self.registry: dict[str, Callable[[Any], Executor]] = dict(registry or {})
        #: The closures of jobs this tab filed and may still run (a retried job runs again).
        self.closures: dict[str, Executor] = closures if closures is not None else {}
        self.locks = locks
        self.yields = dict(yields or {})
        #: ``navigator.onLine`` where the executor runs; None: say nothing of it.
        self.is_online = is_online
        self._refusing = refusing
        self.running: dict[str, _Run] = {}

    def run(self, msg: dict[str, Any]) -> None:
        """A ``run``: refuse it unspent, or start it and answer ``run_started`` now."""
        job_id = msg["job_id"]
        if self._refusing is not None and self._refusing():
            # Claimed after this page let the lease go (freeze/pagehide), before the worker
            # knew: give it back unspent for whoever holds the lease now (pyjobq/engine/lease.py).
            self._send_result(job_id, _claimed({
                "ok": False, "interrupted": True, "code": Code.LEASE_REVOKED,
                "error": "the page let the processor lease go (frozen or hidden)"
                         " before this run began",
            }, msg["claim"]))
            return
        if job_id in self.running:
            # A second run of a job this page is still running (an answer of the first may
            # be in flight): refuse it, unspent, rather than run the job twice at once.
            self._send_result(job_id, _claimed({
                "ok": False, "interrupted": True, "code": Code.ALREADY_RUNNING,
                "error": "this page is still running an earlier claim of this job",
            }, msg["claim"]))
            return
        started = self._start(msg)
        if started is not None:
            # Now: an executor that finished in its first step is answered in this event too.
            start_now(self._finish(job_id, started))

    def check(self, msg: dict[str, Any]) -> None:
        """A ``run_check``: say whether this claim's run is in hand. The link is FIFO, so the
        ``run`` it asks about was handled before it (and answered, if it was refused)."""
        job_id, claim = msg["job_id"], msg["claim"]
        run = self.running.get(job_id)
        started = run is not None and run.claim == claim
        self.link.send(make("run_checked", job_id=job_id, started=started, claim=claim))

    def abort(self, msg: dict[str, Any]) -> None:
        """An ``abort_run``: abort the run's signal (its executor decides what to do)."""
        running = self.running.get(msg["job_id"])
        if running is not None:
            running.signal.abort(msg.get("reason") or "aborted")

    def abandon(self, job_id: str, claim: str, *, at_once: bool = False) -> None:
        """Drop a run: abort its signal; cancel its task at once unless the executor heeds the
        signal (then only after :data:`ABANDON_GRACE_MS`). The run stays in hand — a second
        ``run`` of the job is refused — until its task ended, which the page then confirms."""
        run = self.running.get(job_id)
        if run is None or claim != run.claim:
            return
        if run.abandoned and not at_once:
            return
        run.abandoned = True
        self._stop(run, "abandoned", at_once=at_once)

    def _time_out(self, job_id: str, run: _Run, timeout_ms: float) -> None:
        """The run's timeout passed: abort its signal, and cancel its task at once unless the
        executor heeds the signal (then after :data:`ABANDON_GRACE_MS`, as for an abandoned
        run). Its end says ``timeout`` unless it answered with a success meanwhile."""
        if self.running.get(job_id) is not run or run.abandoned:
            return
        run.timed_out = timeout_ms
        self._stop(run, "timeout")

    def _stop(self, run: _Run, reason: str, *, at_once: bool = False) -> None:
        """Abort the run's signal with ``reason``, and cancel its task now unless the executor
        heeds the signal (then after :data:`ABANDON_GRACE_MS`, unless a grace already runs)."""
        run.signal.abort(reason)
        if at_once or not run.signal.heeded:
            run.task.cancel()
        elif run.grace is None:
            task = run.task

            def cancel() -> None:
                task.cancel()

            run.grace = self.clock.call_later(ABANDON_GRACE_MS, cancel)

    def _executor(self, msg: dict[str, Any]) -> Executor | None:
        """The job's executor: its closure, or rebuilt by its reconstructor. None when the run
        was answered instead (no such reconstructor here, its factory raised, or it returned
        something that cannot be called)."""
        job_id, name = msg["job_id"], msg["reconstructor"]
        executor = self.closures.get(job_id)
        if executor is not None:
            return executor
        factory = self.registry.get(name)
        if factory is None and self._unknown_kind is not None:
            factory = self._unknown_kind(name, msg["job_type"])
        if factory is None:
            self._send_result(job_id,
                              _claimed(error_fields(OrphanedJobError(name)), msg["claim"]))
            return None
        try:
            executor = factory(msg.get("params"))
        except Exception as exc:
            fields = error_fields(exc)
            fields.update(error=f"reconstructor {name!r} raised {fields['error']}",
                          terminal=True, interrupted=False, code=Code.RECONSTRUCTOR_FAILED)
            self._send_result(job_id, _claimed(fields, msg["claim"]))
            return None
        if not callable(executor):
            # Answered now, naming the value: unanswered, the run would wait out the handshake
            # deadline and fail as if this page had no handler for the kind.
            self._send_result(job_id, _claimed({
                "ok": False, "terminal": True, "code": Code.RECONSTRUCTOR_RETURNED_NO_EXECUTOR,
                "error": f"reconstructor {name!r} returned {_shown(executor)}, not an executor: "
                         "have the factory return the job's async def run(signal) (a factory "
                         "with no return statement returns None)",
            }, msg["claim"]))
            return None
        return executor

    def _start(self, msg: dict[str, Any]) -> asyncio.Future[Any] | None:
        """Rebuild the executor, start it and say ``run_started`` — all in the ``run`` message's
        own event, so the handshake costs no extra turn of the event loop."""
        executor = self._executor(msg)
        if executor is None:
            return None
        job_id = msg["job_id"]
        signal = AbortSignal()
        claim: str = msg["claim"]
        # Said before the executor's first step, which runs now (start_now) and may report
        # progress: the engine hears of the run before anything the run says.
        self.link.send(make("run_started", job_id=job_id, claim=claim))
        progress = RunProgress(self.link, job_id, self.clock)
        token = _current_run.set(progress)
        try:
            # Called inside the task: what the call raises, or a result that is not awaitable,
            # ends the run with a run_result like any failure (outside, it escaped this event
            # and left the job running for good, its lane blocked).
            task: asyncio.Future[Any] = start_now(_called(executor, signal))
        finally:
            _current_run.reset(token)
        run = self.running[job_id] = _Run(task, signal, claim, progress)
        timeout_ms = msg.get("timeout_ms")
        if isinstance(timeout_ms, (int, float)) and not isinstance(timeout_ms, bool) \
                and 0 < timeout_ms < math.inf:
            run.deadline = self.clock.call_later(
                timeout_ms, lambda: self._time_out(job_id, run, float(timeout_ms)))
        yield_lock = self.yields.get(msg.get("job_type", ""))
        if yield_lock and self.locks is not None:
            self._hold_shared(yield_lock, task, signal)
        return task

    async def _finish(self, job_id: str, task: asyncio.Future[Any]) -> None:
        """Await the executor and answer ``run_result`` (only these fields survive the closure)."""
        fields: dict[str, Any]
        stopping: BaseException | None = None
        run = self.running[job_id]
        try:
            fields = {"ok": True, "result": await task}
        except asyncio.CancelledError:
            fields = error_fields(PyjobqError("the run was cancelled on its page"))
        except Exception as exc:
            fields = error_fields(exc)
            if self.is_online is not None:
                fields["offline"] = not self.is_online()  # read now: when the attempt failed
            if fields["interrupted"] and not run.signal.aborted:
                fields.update(_unasked(fields))
        except BaseException as exc:  # KeyboardInterrupt, SystemExit, a framework's own
            # The run still ends with its answer (or it would stay running for good, its lane
            # blocked); what stops the program goes on stopping it, once answered.
            fields = error_fields(exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                stopping = exc
        finally:
            if self.running.get(job_id) is run:
                del self.running[job_id]
            if run.grace is not None:
                run.grace.cancel()
            if run.deadline is not None:
                run.deadline.cancel()
        # The report still held goes before the run's end, never after it; an abandoned run's
        # job is gone or cancelled, and its progress with it.
        run.progress.end(send_pending=not run.abandoned)
        if run.abandoned:
            # The scheduler stores nothing of it, and waits for this word that it ended before
            # the job's type runs again.
            self._send_result(job_id, {"ok": False, "error": "abandoned",
                                       "code": Code.ABANDONED, "claim": run.claim})
            if stopping is not None:
                raise stopping
            return
        if run.timed_out is not None and not fields["ok"]:
            # An answer in hand is kept: only a run that did not succeed is a timeout.
            fields = {"ok": False, "code": Code.TIMEOUT,
                      "error": f"the attempt ran longer than its timeout of "
                               f"{run.timed_out / 1000:g} s"}
        if fields["ok"] and isinstance(fields["result"], Answer):
            fields.update(result=fields["result"].result, status=fields["result"].status)
        if fields["ok"]:
            try:
                check_json(fields["result"], "the executor's result")
            except InvalidJobError as exc:
                # Repeating the work would produce the same result: fail at once.
                fields = error_fields(exc)
                fields.update(terminal=True, code=Code.RESULT_NOT_CLONEABLE)
        self._send_result(job_id, _claimed(fields, run.claim))
        if stopping is not None:
            raise stopping

    def _send_result(self, job_id: str, fields: dict[str, Any]) -> None:
        self.link.send(make("run_result", job_id=job_id, **fields))

    def _hold_shared(self, lock: str, task: asyncio.Future[Any], signal: AbortSignal) -> None:
        """Hold the job type's yield lock in shared mode while it runs: foreground work that
        takes it with ``steal: true`` rejects this request, which aborts the job's signal
        (spec: "Yielding")."""
        assert self.locks is not None

        async def hold(_lock: Any) -> None:
            await asyncio.wait({task})

        def released(request: asyncio.Future[Any]) -> None:
            if not request.cancelled() and isinstance(request.exception(), LockStolen):
                signal.abort(f"yield lock {lock!r} was taken")

        held = asyncio.ensure_future(self.locks.request(lock, hold, mode="shared"))
        held.add_done_callback(released)


def _shown(value: Any) -> str:
    """``value``'s repr for an error message, cut short (a factory may return anything)."""
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


async def _called(executor: Callable[[AbortSignal], Any], signal: AbortSignal) -> Any:
    """Call the executor and await what it returns; an executor that is not ``async`` fails its
    job at once, saying so (running it again would do the same)."""
    awaitable = executor(signal)
    if not inspect.isawaitable(awaitable):
        raise Terminal(
            f"the executor {getattr(executor, '__qualname__', repr(executor))!r} returned "
            f"{type(awaitable).__name__}, not an awaitable: define it with 'async def'",
            code=Code.EXECUTOR_NOT_ASYNC)
    return await awaitable
