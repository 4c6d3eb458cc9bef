"""The retry policy: how each way an attempt can end moves a record.

Theory of operation
-------------------
``attempts`` counts the times a job was really tried. It is incremented when a
job is handed to a page (:func:`claim`), and the ceiling is checked right there,
before hand-off, so no outcome can route around it: a job with nothing left to
spend is failed rather than run. Three outcomes give the attempt back because
they say nothing about the job's own work — a 401 (an expired token), a failure
while offline, and an executor that stopped to yield (``interrupted``). A run
whose page went away is *not* given back (:func:`recover`), so a job that crashes
its page every time eventually stops.

Order of the branches (spec: "Retry timing and special HTTP statuses"):

1. ok → done.
2. interrupted → attempt given back; parked if its yield lock is held or its type is
   suspended, else pending now.
3. terminal, or HTTP 400/403/409/413/422 → failed at once, whatever ``max_attempts`` says.
4. HTTP 401 → pending in 60 s, attempt given back; never consults ``max_attempts``. After
   24 hours of nothing but 401s (``UNAUTHORIZED_FOR_MS``) → failed, ``unauthorized``.
5. offline (no HTTP status: nothing was reached) → pending on the ordinary ladder, attempt given
   back.
6. otherwise (404 included) → failed at the ceiling, else pending on the ladder — or later, when
   a 429 or 503 said ``Retry-After`` (honoured up to an hour).

A record that ends (done, failed, cancelled) says why in ``error``, ``http_status`` and
``code``, all three set by the move that ended it from the cause that did: nothing an
earlier attempt left survives it (a job whose page died on its last try is ``page_gone``,
not the 401 of the try before). :func:`_move` refuses a terminal move that does not name
all three.

Every function here returns a new record; none performs I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from .backoff import RETRY_AFTER_CAP_MS
from .codes import Code
from .records import JobRecord, RunResult, is_service_worker
from .status import TERMINAL, Event, Status, apply

#: Replaying a byte-identical request cannot change permissions, resolve a
#: conflict, fix a malformed or invalid body or make it smaller. Closed on purpose: callers must
#: treat one HTTP status the same way everywhere. 404 is deliberately absent (RFC 9110 §15.5.5).
TERMINAL_STATUSES = frozenset({400, 403, 409, 413, 422})
UNAUTHORIZED = 401
AUTH_RETRY_MS = 60_000.0
#: How long a job may be answered nothing but 401s before it fails ``unauthorized``: a day of
#: tries a minute apart, time enough for a user to come back and sign in again, yet a bound.
UNAUTHORIZED_FOR_MS = 24 * 3600 * 1000.0
#: The statuses whose ``Retry-After`` is honoured (RFC 9110 §10.2.3, RFC 6585 §4).
RETRY_AFTER_STATUSES = frozenset({429, 503})
#: The code of a failure with no network below: coming back online makes such jobs due at once.
OFFLINE = Code.OFFLINE


#: What a terminal record is explained by; every move to one sets all three.
_WHY = frozenset({"error", "http_status", "code"})


def _move(record: JobRecord, event: Event, now: float, **changes: object) -> JobRecord:
    status = apply(record.status, event)
    if status in TERMINAL and not _WHY <= changes.keys():
        raise TypeError(
            f"a move to {status.value} must set error, http_status and code from its own "
            "cause (an earlier attempt's would explain it); "
            f"missing {sorted(_WHY - changes.keys())}")
    if status is not Status.PENDING:
        changes.setdefault("next_retry_at", None)
    if status is not Status.RUNNING:
        changes.setdefault("owner", None)
    if status is not Status.PAUSED:
        changes.setdefault("yield_lock", None)
    if (status in TERMINAL and changes.get("code") != Code.UNAUTHORIZED) \
            or event is Event.REVIVE:
        changes["unauthorized_since"] = None  # a job that runs again starts its 401s afresh
    return record.evolve(status=status, updated_at=now, **changes)


def claim(record: JobRecord, now: float, owner: str, lease_ms: float | None = None) -> JobRecord:
    """Hand a pending job to a page: running with one more attempt, or failed if none is left.

    With ``lease_ms`` the claim is a lease (the outbox's ``reservedTo``): the running
    record's ``next_retry_at`` is ``now + lease_ms``, after which :func:`reclaim` may
    take it. Without, the job queue's lock-based :func:`recover` is what frees it.
    """
    if record.attempts >= record.max_attempts:
        return _move(
            record, Event.FAIL, now,
            error=f"no attempts left ({record.attempts} of {record.max_attempts} spent)",
            http_status=None, code=Code.ATTEMPTS_EXHAUSTED,
        )
    lease = None if lease_ms is None else now + lease_ms
    return _move(record, Event.CLAIM, now, attempts=record.attempts + 1, owner=owner,
                 next_retry_at=lease)


def reclaim(record: JobRecord, now: float, owner: str, lease_ms: float) -> JobRecord:
    """A running record whose lease ran out, claimed again in one write.

    Its holder is presumed gone, so this is :func:`recover` (the dead run spent its
    attempt; failed at the ceiling, ``page_gone``, saying it was the lease that ran out)
    followed by :func:`claim` under a new lease.
    """
    if record.status is Status.RUNNING and record.attempts >= record.max_attempts:
        return _move(
            record, Event.FAIL, now,
            error=f"its lease ran out on the last allowed attempt ({record.attempts} of "
                  f"{record.max_attempts}): the page running it closed, crashed or froze "
                  "mid-run, so whether its work was done is unknown",
            http_status=None, code=Code.PAGE_GONE,
        )
    return claim(recover(record, now), now, owner, lease_ms)


def settle(
    record: JobRecord,
    outcome: RunResult,
    *,
    now: float,
    online: bool,
    backoff: Callable[[int], float],
    held_yield_lock: str | None = None,
    suspended: bool = False,
    http_status_rules: bool = True,
) -> JobRecord:
    """Apply a page's ``run_result`` to the running record it answers.

    ``held_yield_lock`` names the job type's yield lock when someone holds it
    exclusively; ``suspended`` says the job's (volatile) type is suspended. Either
    parks an interrupted job instead of re-queueing it. Without ``http_status_rules``
    (the outbox) an HTTP status is an ordinary failure — no 60 s 401 wait, no
    400/403/409/413/422 fail-fast; the handler's ``is_retryable_error`` made any of them
    terminal already — and a failure while offline is released uncounted whatever it
    carried (spec outbox.txt: "Offline releaseUncounted ... then skip").
    """
    if outcome.ok:
        return _move(record, Event.SUCCEED, now, result=outcome.result, error=None,
                     http_status=outcome.status, code=None, unauthorized_since=None)
    # A server's answer other than 401 ends a run of 401s; an attempt that reached no server
    # (offline, interrupted) says nothing of the credentials and leaves it as it was.
    since = None if outcome.status is not None else record.unauthorized_since
    failure: dict[str, object] = dict(error=outcome.error or "failed", http_status=outcome.status,
                                      code=outcome.code, unauthorized_since=since)
    given_back = dict(attempts=max(0, record.attempts - 1), given_back=record.given_back + 1)
    if outcome.interrupted:
        if held_yield_lock is not None or suspended:
            return _move(record, Event.PARK, now, yield_lock=held_yield_lock, **given_back,
                         **failure)
        return _move(record, Event.RETRY, now, next_retry_at=now, **given_back, **failure)
    if outcome.terminal or (http_status_rules and outcome.status in TERMINAL_STATUSES):
        return _move(record, Event.FAIL, now, **failure)
    if http_status_rules and outcome.status == UNAUTHORIZED:
        since = record.unauthorized_since if record.unauthorized_since is not None else now
        failure["unauthorized_since"] = since
        if now - since >= UNAUTHORIZED_FOR_MS:
            hours = UNAUTHORIZED_FOR_MS / 3_600_000
            return _move(record, Event.FAIL, now, **{
                **failure, "code": Code.UNAUTHORIZED,
                "error": f"{failure['error']} — every attempt for {hours:g} hours was answered "
                         "401: the credentials were never renewed"})
        return _move(record, Event.RETRY, now, next_retry_at=now + AUTH_RETRY_MS, **given_back,
                     **failure)
    if not online and (outcome.status is None or not http_status_rules):
        # Only a failure that never reached a server says nothing about the job: one with an
        # HTTP status was answered, so it counts whatever the network did afterwards.
        # The ladder climbs with every try, counted or not, so an offline job
        # backs off to the cap and re-checks by itself without an online event.
        delay = backoff(record.attempts + record.given_back)
        failure["code"] = outcome.code or OFFLINE
        return _move(record, Event.RETRY, now, next_retry_at=now + delay, **given_back, **failure)
    if record.attempts >= record.max_attempts:
        return _move(record, Event.FAIL, now, **failure)
    delay = backoff(record.attempts)
    if http_status_rules and outcome.status in RETRY_AFTER_STATUSES \
            and outcome.retry_after_ms is not None:
        delay = max(delay, min(outcome.retry_after_ms, RETRY_AFTER_CAP_MS))
    return _move(record, Event.RETRY, now, next_retry_at=now + delay, **failure)


def after_abort(outcome: RunResult) -> RunResult:
    """The outcome of a run its engine aborted (``suspend_type``): whatever the executor raised
    counts as interrupted — it stopped because it was told to (spec: "An interrupted attempt
    does not count as a failure"). A success stays a success."""
    if outcome.ok or outcome.interrupted:
        return outcome
    return dataclasses.replace(outcome, interrupted=True, terminal=False)


def claim_due(record: JobRecord, now: float, owner: str,
              lease_ms: float | None) -> JobRecord | None:
    """The claim's read-modify-write on what the store holds now: a pending record is claimed;
    on leases, a running record whose lease ran out is reclaimed; anything else is left alone
    (a stale view can never claim a record that changed or went)."""
    if record.status is Status.PENDING:
        return claim(record, now, owner, lease_ms)
    if (lease_ms is not None and record.status is Status.RUNNING
            and record.next_retry_at is not None and record.next_retry_at <= now):
        return reclaim(record, now, owner, lease_ms)
    return None


def waits_offline(record: JobRecord) -> bool:
    """Whether ``record`` waits out a failure it had with no network (pending, code offline)."""
    return record.status is Status.PENDING and record.code == OFFLINE


def back_online(record: JobRecord, now: float) -> JobRecord | None:
    """A pending job waiting out an offline failure is due now that the network is back
    (spec: "capped, so the job re-checks by itself … and sooner when [an online event] is")."""
    if not waits_offline(record):
        return None
    if record.next_retry_at is not None and record.next_retry_at <= now:
        return None
    return record.evolve(next_retry_at=now, updated_at=now)


#: How many attempts given back a Service Worker's recovered run may still add to (:func:`recover`).
SW_GIVE_BACKS = 3


def recover(record: JobRecord, now: float) -> JobRecord:
    """A running record whose page went away: its attempt is spent; pending again,
    or failed at the ceiling.

    A run a Service Worker held (:func:`~pyjobq.core.records.is_service_worker`) was most
    likely cut short by the browser — it ends a Service Worker at its event's limit, whatever
    the job does — so its attempt is given back, as for an interrupted run: the job is pending
    again, due now, and climbs the backoff ladder (``given_back``), not the ceiling. At most
    :data:`SW_GIVE_BACKS` times (``cut_short``, counted apart from the attempts given back for
    401s, offline failures and interruptions, which say nothing of the Service Worker): a job
    that kills the Service Worker every time spends its attempts then, and stops as one that
    crashes its page every time does (spec: "eventually stops rather than coming back for
    ever")."""
    if is_service_worker(record.owner) and record.cut_short < SW_GIVE_BACKS:
        return _move(record, Event.RECOVER, now, next_retry_at=now,
                     attempts=max(0, record.attempts - 1), given_back=record.given_back + 1,
                     cut_short=record.cut_short + 1)
    if record.attempts >= record.max_attempts:
        return _move(
            record, Event.FAIL, now,
            error=f"the page running the last allowed attempt ({record.attempts} of "
                  f"{record.max_attempts}) went away mid-run",
            http_status=None, code=Code.PAGE_GONE,
        )
    return _move(record, Event.RECOVER, now, next_retry_at=now)


def park(record: JobRecord, now: float, lock: str | None) -> JobRecord:
    """Pending → paused, waiting for its yield ``lock`` (None: for its type's suspension). A
    paused record has no ``next_retry_at``: what was left of a backoff is :func:`backoff_left`'s,
    read before the park."""
    return _move(record, Event.PARK, now, yield_lock=lock)


def backoff_left(record: JobRecord, now: float) -> float | None:
    """When a pending record waiting out a backoff (or a delay) is due; None when it is due
    already. What a suspension keeps for :func:`unpark`: the backoff is the retry policy's, and
    a suspension says nothing about the job's own work."""
    due = record.next_retry_at
    return due if record.status is Status.PENDING and due is not None and due > now else None


def unpark(record: JobRecord, now: float, due_at: float | None = None) -> JobRecord:
    """Paused → pending: due now, or at ``due_at`` when that is later (what was left of its
    backoff when it was parked, :func:`backoff_left`)."""
    return _move(record, Event.UNPARK, now,
                 next_retry_at=now if due_at is None else max(now, due_at))


def fail(record: JobRecord, now: float, error: str, code: str | None = None) -> JobRecord:
    """Failed for a cause no HTTP answer had part in (a handshake that never came, say)."""
    return _move(record, Event.FAIL, now, error=error, http_status=None, code=code)


def cancel(record: JobRecord, now: float) -> JobRecord:
    return _move(record, Event.CANCEL, now, error="cancelled", http_status=None,
                 code=Code.CANCELLED)


def prunable(
    failed: Sequence[JobRecord], now: float, *, max_age_ms: float | None, max_count: int | None
) -> list[str]:
    """Ids of failed records to delete: older than ``max_age_ms``, and the oldest beyond
    ``max_count``.

    The job queue never calls this — it keeps failed records until ``delete_job``
    (spec: "Startup and cleanup"). It is the outbox's ``prune`` option.
    """
    ordered = sorted((r for r in failed if r.status is Status.FAILED),
                     key=lambda r: (r.updated_at, r.id))
    doomed: list[str] = []
    if max_age_ms is not None:
        doomed = [r.id for r in ordered if r.updated_at < now - max_age_ms]
    kept = [r for r in ordered if r.id not in set(doomed)]
    if max_count is not None and len(kept) > max_count:
        doomed += [r.id for r in kept[: len(kept) - max_count]]
    return doomed


def revive(record: JobRecord, now: float) -> JobRecord:
    """retry_all(): a failed or cancelled job runs again with a fresh budget."""
    return _move(record, Event.REVIVE, now, attempts=0, given_back=0, cut_short=0,
                 next_retry_at=now, error=None, code=None, http_status=None, result=None)
