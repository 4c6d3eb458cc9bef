"""The scheduler worker's boot, watched and retried: :class:`Boot`.

A page's persistent engine is a worker that boots in steps, each reported on its link
(``worker.mjs``): ``worker_alive`` (its script and Pyodide's loader run), ``worker_progress``
(bytes of the distribution's files arrive), ``worker_fetched`` (it holds every file it needs:
it may get in line for the processor lease), ``worker_booting`` (it holds the lease and
starts Pyodide from those bytes), then the scheduler's ``ready``; or ``worker_error`` at a
stage. :class:`Boot` follows those steps with one deadline — no step for ``stall_ms`` while
the worker is fetching or booting is a stalled boot — and decides what a failure means
(:mod:`pyjobq.core.boot`):

* **permanent** (a CSP, a worker script that throws, a distribution that is not where the
  page says): every persistent call raises :class:`~pyjobq.WorkerUnavailable` from then on,
  as before;
* **transient** (offline, a stall, a dropped download): the page lets the lease go at once
  (a tab that cannot process never holds it), its own scheduler keeps storing and answering
  its requests, its jobs' ``done`` stays pending, one warning is logged, and a new worker is
  started on ``online`` or on the backoff ladder, until one boots.

The platform's part — ending a worker, starting one, the lease — is a :class:`WorkerStart`
(the browser runtime's; a simulated tab's would be another).

Runs on the page only (its main thread, or a worker host such as a notebook kernel): it
follows the scheduler worker from outside and is never imported there.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

from ..core import boot as policy
from ..core.backoff import make_backoff
from ..core.errors import WorkerUnavailable
from ..core.ports import Clock, Timer
from ..core.router import Router
from .client import EngineClient

log = logging.getLogger("pyjobq")


class WorkerStart(Protocol):
    """What a :class:`Boot` asks of its platform."""

    def end(self) -> None:
        """End the current worker, whatever it is doing (it has not booted: no run is lost),
        and let the lease go: nothing more is heard from it."""

    def start(self) -> None:
        """Start a new worker on the same link (after :meth:`end`)."""

    def get_in_line(self) -> None:
        """The worker holds what it needs to boot: ask for the processor lease for it."""

    def let_lease_go(self) -> None:
        """Release the processor lease, or leave its queue, at once."""

    def is_online(self) -> bool:
        """``navigator.onLine`` here."""

    def warn(self, text: str) -> None:
        """Say ``text`` where a developer looks even with no logging set up (the console)."""


class Boot:
    """Follows the worker's boot on ``client``'s link and retries a failed or stalled one.

    Args:
        client: the persistent engine's client (its link reaches the worker).
        start: the platform's part.
        clock: for the deadline and the retry timer.
        stall_ms: the longest a fetching or booting worker may go without a step.
        backoff: attempt number → delay before the next start (the job queue's ladder).
    """

    def __init__(self, client: EngineClient, start: WorkerStart, clock: Clock, *, stall_ms: float,
                 backoff: Callable[[int], float] = make_backoff()) -> None:
        self._client = client
        #: The platform's part (the browser runtime's has ``worker``: the scheduler's Worker now).
        self.platform = start
        self._clock = clock
        self.stall_ms = stall_ms
        self._backoff = backoff
        #: Failures in a row since the last boot that reached ``ready``.
        self.failures = 0
        #: The last transient failure, while a new worker is awaited (None otherwise).
        self.retrying: policy.BootFailure | None = None
        #: The last failure seen, kept until a boot reaches ``ready`` (for DevTools and tests).
        self.last_failure: policy.BootFailure | None = None
        self._deadline: Timer | None = None
        self._retry_timer: Timer | None = None
        self._warned = False
        self._unsubscribe = client.link.subscribe(Router("pyjobq boot", {
            "worker_alive": self._step,
            "worker_progress": self._step,
            "worker_fetched": self._fetched,
            "worker_booting": self._step,
            "worker_error": self._error,
            "ready": self._ready,
        }, quiet=True))
        self._arm()  # the worker's script must say something

    @property
    def booted(self) -> bool:
        return self._client.ready

    # ------------------------------------------------------------ the worker's steps

    def _step(self, _msg: dict[str, Any]) -> None:
        self._arm()

    def _fetched(self, _msg: dict[str, Any]) -> None:
        if self.booted or self._client.unavailable is not None or self.retrying is not None:
            return  # a worker given up on (its word was on the way) never gets in line
        self._disarm()  # waiting in line is not bounded: the lease may be held elsewhere for hours
        self.platform.get_in_line()

    def _ready(self, msg: dict[str, Any]) -> None:
        if msg["source"] != self._client.source:
            return
        self._disarm()
        if self._warned:
            log.warning("pyjobq: the scheduler worker booted after %d failed tries", self.failures)
        self.failures, self._warned, self.last_failure = 0, False, None

    def _error(self, msg: dict[str, Any]) -> None:
        stage = msg.get("stage")
        self.failed(policy.BootFailure(
            stage=stage if isinstance(stage, str) else "start", message=msg["message"],
            online=self.platform.is_online(), refused=msg.get("refused") is True))

    def _arm(self, *, again: bool = False) -> None:
        if self.booted or self._client.unavailable is not None:
            return
        self._disarm()
        stall_ms = self.stall_ms
        armed_at = self._clock.now()

        def stalled() -> None:
            self._deadline = None
            if not policy.is_stalled(armed_at, self._clock.now(), stall_ms, armed_again=again):
                # Fired late: this page could not run (frozen with its worker, or busy), so the
                # worker's silence says nothing yet. Judged from now, once (pyjobq/core/boot.py).
                self._arm(again=True)
                return
            self.failed(policy.BootFailure(
                stage=policy.TIMEOUT, message=f"no progress within {stall_ms / 1000:g} s",
                online=self.platform.is_online()))

        self._deadline = self._clock.call_later(stall_ms, stalled)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # ------------------------------------------------------------ failures and retries

    def failed(self, failure: policy.BootFailure) -> None:
        """This worker will not boot (its own report, the deadline, or the platform's word,
        e.g. a CSP violation): let the lease go, then fail for good or start again later."""
        if self.booted or self._client.unavailable is not None or self.retrying is not None:
            return  # booted already, failed for good, or this worker was given up on
        self._disarm()
        self.failures += 1
        self.last_failure = failure
        retry = policy.after_failure(failure, self.failures, self._backoff)
        if retry is None:
            self.platform.let_lease_go()
            self._client.fail(WorkerUnavailable.not_started(failure.stage, failure.message))
            return
        # Ended at once: a stalled download that finishes later must not put it in line.
        self.platform.end()
        # The page's own scheduler stores and answers this tab's requests meanwhile: the
        # records wait for a worker that boots (here or in another tab), nothing is lost.
        self._client.release_held()
        self.retrying = failure
        self._retry_timer = self._clock.call_later(retry.delay_ms, self.retry)
        if not self._warned:
            self._warned = True
            text = (f"pyjobq: the scheduler worker could not boot ({failure.stage}): "
                    f"{failure.message.strip()}. This tab let the processor lease go and starts "
                    "a new worker when the browser is back online, or in "
                    f"{retry.delay_ms / 1000:.0f} s (then less and less often); its persistent "
                    "jobs stay stored and pending meanwhile (another tab may run them), and their "
                    "done resolves once they have run.")
            log.warning("%s", text)
            self.platform.warn(text)
        else:
            log.info("pyjobq: the scheduler worker could not boot (%s, try %d): %s",
                     failure.stage, self.failures, failure.message)

    def replace(self, reason: str) -> None:
        """Start a new worker now in place of one that will not do (a preloaded worker of
        another distribution, or one that never answered): not a failed boot, so no retry is
        counted and no lease is held yet (it is asked for only at ``worker_fetched``)."""
        if self.booted or self._client.unavailable is not None or self.retrying is not None:
            return
        log.warning("pyjobq: %s; starting a worker of its own", reason)
        self.platform.warn(f"pyjobq: {reason}; starting a worker of its own")
        self.platform.end()
        self.platform.start()
        self._arm()

    def online(self) -> None:
        """The browser is back online: a retry that waits starts now."""
        if self.retrying is not None:
            self.retry()

    def retry(self) -> None:
        """Start a new worker now (a retry that waits; nothing otherwise)."""
        if self.retrying is None:
            return
        self.retrying = None
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        self.platform.start()
        self._arm()

    def close(self) -> None:
        self._unsubscribe()
        self._disarm()
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
