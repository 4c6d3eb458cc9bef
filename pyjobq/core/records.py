"""Job records: an unsaved :class:`NewJob` and the stored :class:`JobRecord`.

The stored form is a flat JSON-like dict (the IndexedDB value). ``_reconstructor``
and ``_params`` are how a persistent job is rebuilt after a reload (spec:
"Rebuilding a closure after reload"); they are never the closure itself and
never credentials. ``next_retry_at`` is set only while a record is pending, so
the ``by_next_retry`` index holds exactly the records waiting to run — or, when
the scheduler runs on leases (``Mode.lease_ms``, the outbox mode), on a
running record as the end of its lease: the outbox's ``reservedTo``, one field for
"not before" whatever the status, so a lease that ran out is found by the same index.
"""

from __future__ import annotations

import json
import math
import operator
import os
import reprlib
from dataclasses import InitVar, dataclass, field, fields, replace
from typing import Any, Mapping

from .codes import Code
from .errors import InvalidJobError, PyjobqError
from .status import TERMINAL, Status

DEFAULT_MAX_ATTEMPTS = 5
FETCH = "fetch"
#: The reconstructor name of volatile jobs: their closure lives only in this tab's memory.
VOLATILE = "volatile"
#: The job kinds pyjobq itself runs: no reconstructor or task may take their names (it would
#: replace how every fetch job is sent, or run as a volatile job).
BUILT_IN_KINDS = frozenset({FETCH, VOLATILE})
FETCH_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RecordError(PyjobqError):
    """A stored value is not a valid job record (missing, mistyped or out-of-range fields)."""


class ForeignRecord(RecordError):
    """A stored record with a status this version does not know: a newer pyjobq's.

    Stores leave it exactly as it is — never rewritten, never run, never failed.
    """


def new_id() -> str:
    """A random id: a version-4 UUID's 32 hex digits, as ``uuid.uuid4().hex`` makes, without
    the ``UUID`` object (a tenth of an enqueue's own time in a burst)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return b.hex()


#: The sources of the schedulers pyjobq's Service Worker runs begin with it (pages' are
#: :func:`new_id` s, hex digits only).
SERVICE_WORKER_SOURCE = "sw-"


def service_worker_source() -> str:
    """A source for a scheduler in pyjobq's Service Worker."""
    return SERVICE_WORKER_SOURCE + new_id()


def is_service_worker(owner: str | None) -> bool:
    """Whether the scheduler ``owner`` ran in pyjobq's Service Worker (its runs end when the
    browser ends the Service Worker's event, not because of the job)."""
    return owner is not None and owner.startswith(SERVICE_WORKER_SOURCE)


#: How deep a stored value may nest (a list or dict inside another counts one level). The
#: enqueue check, the result check and record decoding all use this one limit, so whatever
#: passes the check can be stored, copied, sent and read back: far below CPython's recursion
#: limit (``asdict``, ``json`` and Pyodide's ``to_js``/``to_py`` recurse) and structured clone's.
MAX_DEPTH = 100


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep ``value`` nests, counted without recursion; stops counting past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            level += 1
            deepest = max(deepest, level)
            if level > limit:
                return level
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level) for child in children)
    return deepest


def shallow_json(text: str, limit: int = MAX_DEPTH + 1) -> bool:
    """Whether the value whose JSON text is ``text`` surely nests no deeper than ``limit``
    (by default a record's: :data:`MAX_DEPTH` below its own level): it opens no more objects
    and arrays than that in all. A bound, counted at C speed (brackets inside strings count
    too), so a ``False`` only means the nesting must be walked."""
    return text.count("{") + text.count("[") <= limit


#: What :func:`check_str` tells a caller to pass, for each kind of argument.
A_JOB_ID = "a job's id, a str such as job.id or the id of a row of query_all()"
A_GROUP = "a group name, a str: the group= the jobs were filed with"
A_TYPE = "a job type, a str: the type= the jobs were filed with"
A_KEY = "None, or a key: a non-empty str naming the one piece of work the job carries (\"doc-1\")"


def check_key(value: Any, call: str) -> str | None:
    """``value`` when it is None or a non-empty str; otherwise :class:`InvalidJobError` naming
    the call (``"enqueue_fetch(key)"``), what it got, and what to pass."""
    if value is None or (isinstance(value, str) and value != ""):
        return value
    raise InvalidJobError(
        f"{call}: expected {A_KEY}; got {reprlib.repr(value)} ({type(value).__name__})")


def check_str(value: Any, call: str, expected: str) -> str:
    """``value``, when it is a str; otherwise :class:`InvalidJobError` naming the call and its
    argument (``call``: ``"delete_job(job_id)"``), what it got, and what to pass (``expected``:
    :data:`A_JOB_ID`, :data:`A_GROUP`, :data:`A_TYPE`). A public call checks its arguments
    itself, where the caller can hear it: a message the scheduler refuses is answered only
    with an error, and a value no message can carry is never sent."""
    if not isinstance(value, str):
        raise InvalidJobError(
            f"{call}: expected {expected}; got {reprlib.repr(value)} ({type(value).__name__})")
    return value


def check_json(value: Any, what: str) -> Any:
    """Raise :class:`InvalidJobError` unless ``value`` survives JSON (what storage and messages
    hold) and nests no deeper than :data:`MAX_DEPTH`. The encoding is C's; the nesting is
    walked only when the text could nest too deep (:func:`shallow_json`)."""
    json_text(value, what)
    return value


def json_text(value: Any, what: str, *, limit: int = MAX_DEPTH, why: str = "") -> str:
    """``value``'s JSON text, as :func:`check_json` checks it (nesting at most ``limit`` levels;
    ``why`` says why a lower limit, in the error)."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        _need_shallow(value, what, limit, why)  # too deep says so, whatever else is wrong
        raise InvalidJobError(
            f"{what} must be JSON-like (dict, list, str, int, float, bool, None) so it can be "
            f"stored and sent between tabs: {exc}"
        ) from None
    if not shallow_json(text, limit):
        _need_shallow(value, what, limit, why)
    return text


def stored_json(value: Any, what: str, *, limit: int = MAX_DEPTH, why: str = "",
                instead: str = "") -> str:
    """``value``'s JSON text, as :func:`json_text` checks it, refused unless reading it back
    gives ``value`` again: what a job is given on each replay is what its caller filed.

    JSON's objects have only str keys, so ``{1: a, "1": b}`` would be stored as one key (one value
    lost, silently) and ``{1: a}`` come back as ``{"1": a}``; a tuple comes back a list. ``==``
    tells each of them from what JSON gives. ``instead``: another way out, for the error.

    Raises:
        InvalidJobError: not JSON-like, too deep, or it would not come back as it was.
    """
    text = json_text(value, what, limit=limit, why=why)
    back = json.loads(text)
    if back != value:
        raise InvalidJobError(
            f"{what} would not come back as it was after the job is stored: "
            f"{reprlib.repr(value)} would be read as {reprlib.repr(back)}. Pass JSON's own types "
            f"(dict with str keys, list rather than tuple, str, int, float, bool, None){instead}")
    return text


def _need_shallow(value: Any, what: str, limit: int = MAX_DEPTH, why: str = "") -> None:
    if depth(value) > limit:
        raise InvalidJobError(
            f"{what} must be JSON-like (dict, list, str, int, float, bool, None) so it can be "
            f"stored and sent between tabs: it nests deeper than {limit} levels{why}"
        )


@dataclass(frozen=True)
class NewJob:
    """A job as the caller asked for it: no timestamps, no status yet."""

    id: str
    reconstructor: str
    params: Any
    type: str = "default"
    group: str | None = None
    label: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    delay_ms: float = 0
    #: Keys that replace: a job stored with a key replaces the waiting job of that key, in the
    #: transaction that stores it (:meth:`pyjobq.core.ports.Store.add`).
    key: str | None = None
    #: The longest one attempt may run, in ms (``timeout_s`` of the call); None: no bound.
    timeout_ms: float | None = None
    #: ``params``' JSON text when the caller has it, checked (:func:`json_text`, with words of
    #: its own: ``enqueue_fetch`` checks its body): not encoded again. Not a field.
    params_json: InitVar[str | None] = None
    #: The JSON text of ``params`` as checked when the job was made: what ``enqueue`` carries, so
    #: what is stored is what was checked, whatever the caller does to its objects afterwards.
    _params_text: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self, params_json: str | None) -> None:
        # One expression for the usual job, the checks one by one only when it fails (a burst
        # files 10,000 jobs: each check a call cost more than the checking).
        delay = self.delay_ms
        if not (isinstance(self.id, str) and self.id != ""
                and isinstance(self.reconstructor, str) and self.reconstructor != ""
                and isinstance(self.type, str) and self.type != ""
                and (self.group is None or isinstance(self.group, str))
                and (self.label is None or isinstance(self.label, str))
                and (self.key is None or (isinstance(self.key, str) and self.key != ""))
                and isinstance(self.max_attempts, int) and not isinstance(self.max_attempts, bool)
                and self.max_attempts >= 1
                and isinstance(delay, (int, float)) and not isinstance(delay, bool)
                and math.isfinite(delay) and delay >= 0
                and (self.timeout_ms is None or _positive(self.timeout_ms))):
            self._explain()
        object.__setattr__(self, "_params_text", params_json if params_json is not None
                           else json_text(self.params, "the job's params"))

    def _explain(self) -> None:
        """Raise :class:`InvalidJobError` naming the first field that is wrong."""
        # Each message is only made when its check fails.
        _need(isinstance(self.id, str) and self.id != "",
              "id must be a non-empty str, got {}", self.id)
        _need(isinstance(self.reconstructor, str) and self.reconstructor != "",
              "reconstructor must be a non-empty str naming a registered factory, got {}",
              self.reconstructor)
        _need(isinstance(self.type, str) and self.type != "",
              "type must be a non-empty str, got {}", self.type)
        _need(self.group is None or isinstance(self.group, str),
              "group must be a str or None, got {}", self.group)
        _need(self.label is None or isinstance(self.label, str),
              "label must be a str or None, got {}", self.label)
        _need(self.key is None or (isinstance(self.key, str) and self.key != ""),
              "key must be a non-empty str or None, got {}", self.key)
        _need(
            isinstance(self.max_attempts, int) and not isinstance(self.max_attempts, bool)
            and self.max_attempts >= 1,
            "max_attempts must be an int >= 1, got {}", self.max_attempts,
        )
        _need(
            isinstance(self.delay_ms, (int, float)) and not isinstance(self.delay_ms, bool)
            and math.isfinite(self.delay_ms) and self.delay_ms >= 0,
            "delay_ms must be a finite number >= 0, got {}", self.delay_ms,
        )
        _need(self.timeout_ms is None or _positive(self.timeout_ms),
              "timeout must be a finite number of seconds > 0 or None, got {} ms",
              self.timeout_ms)

    def to_message(self) -> dict[str, Any]:
        """The job as ``enqueue`` carries it: its fields, ``params`` as the JSON text checked
        when the job was made (``params_json``)."""
        message = dict(zip(_NEW_JOB_NAMES, _get_new_job(self)))
        del message["params"]  # carried once, as the text (the link would copy both)
        message["params_json"] = self._params_text
        return message

    @classmethod
    def from_message(cls, data: Mapping[str, Any]) -> "NewJob":
        """A job of an ``enqueue`` message. Its fields are checked again. Its params come as the
        JSON text checked where the job was made (``params_json``): decoded, not encoded and
        checked once more (that was a tenth of a burst's time on the page), their nesting
        bounded by the text's brackets. A message with ``params`` itself is checked whole."""
        fields_given = {name: data[name] for name in _NEW_JOB_NAMES if name in data}
        text = data.get("params_json")
        try:
            if not isinstance(text, str):
                return cls(**fields_given)
            try:
                params = json.loads(text)
            except ValueError as exc:
                raise InvalidJobError(f"malformed job: params_json is not JSON: {exc}") from None
            if not shallow_json(text, MAX_DEPTH):
                _need_shallow(params, "the job's params")
            return cls(**{**fields_given, "params": params}, params_json=text)
        except TypeError as exc:
            raise InvalidJobError(f"malformed job: {exc}") from None

    def to_record(self, now: float, *, due: float | None = None) -> "JobRecord":
        """The record stored for it, created at ``now`` and due at ``due`` (by default
        ``now`` plus its ``delay_ms``)."""
        return JobRecord(
            id=self.id,
            type=self.type,
            group=self.group,
            label=self.label,
            status=Status.PENDING,
            attempts=0,
            max_attempts=self.max_attempts,
            created_at=now,
            updated_at=now,
            next_retry_at=now + self.delay_ms if due is None else due,
            _reconstructor=self.reconstructor,
            _params=self.params,
            key=self.key,
            timeout_ms=self.timeout_ms,
        )


#: NewJob's fields, read once (``dataclasses.fields`` builds its tuple at each call).
_NEW_JOB_FIELDS = tuple(f for f in fields(NewJob) if f.init)
_NEW_JOB_NAMES = tuple(f.name for f in _NEW_JOB_FIELDS)
_get_new_job = operator.attrgetter(*_NEW_JOB_NAMES)

def _positive(value: Any) -> bool:
    """Whether ``value`` is a finite number > 0 (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0


def _shown(value: Any) -> str:
    return reprlib.repr(value)


def _need(ok: bool, message: str, *shown: Any) -> None:
    """Raise :class:`InvalidJobError` unless ``ok``: ``message`` with each of ``shown`` put in
    its ``{}`` as a short repr."""
    if not ok:
        raise InvalidJobError(message.format(*(_shown(value) for value in shown)))


@dataclass(frozen=True)
class JobRecord:
    """A stored job. Change it with :meth:`evolve`; status changes go through the policy."""

    id: str
    type: str
    status: Status
    attempts: int
    max_attempts: int
    created_at: float
    updated_at: float
    _reconstructor: str
    _params: Any
    group: str | None = None
    label: str | None = None
    next_retry_at: float | None = None
    result: Any = None
    error: str | None = None
    http_status: int | None = None
    code: str | None = None
    #: Attempts handed back (401, offline, interrupted): they climb the ladder, not the ceiling.
    given_back: int = 0
    #: Runs a Service Worker held that the browser ended, their attempts given back
    #: (``policy.recover``, at most ``SW_GIVE_BACKS``): counted apart from ``given_back``, so
    #: offline and 401 give-backs never use up a job's allowance for being cut short.
    cut_short: int = 0
    #: The lock a paused job waits on; None for a suspended (volatile) type.
    yield_lock: str | None = None
    #: Which scheduler handed the job to a page, while it is running.
    owner: str | None = None
    #: The job's key (``enqueue_fetch(..., key=)``): at most one waiting and one running job
    #: per key; a newer one replaces the waiting one (pyjobq/core/ports.py, ``Store.add``).
    key: str | None = None
    #: The longest one attempt may run, in ms; None: no bound (``NewJob.timeout_ms``).
    timeout_ms: float | None = None
    #: When the 401s began that every attempt since was answered with; None: the last attempt
    #: was not a 401. Past ``policy.UNAUTHORIZED_FOR_MS`` of them the job fails ``unauthorized``.
    unauthorized_since: float | None = None
    #: Fields this version does not know (a newer pyjobq's), written back as they were.
    unknown_fields: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def evolve(self, **changes: Any) -> "JobRecord":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The stored value: every field (``status`` as its string) and the unknown fields kept.

        Shallow: nested values are the record's own. Every store copies what it writes
        (structured clone, or JSON in the fakes), so nothing stored can alias them."""
        d = dict(zip(_STORED, _get_stored(self)))
        d["status"] = self.status.value
        return {**self.unknown_fields, **d} if self.unknown_fields else d

    def summary(self) -> dict[str, Any]:
        """What travels in a ``job-update``: no ``_params`` and no unknown fields (either may be
        large), and a ``result`` only when it is small (:data:`NEWS_RESULT_LIMIT`); a bigger one
        is left out with ``result_truncated: True`` and read from the store by whoever needs it."""
        d = dict(zip(_SUMMARY, _get_summary(self)))
        d["status"] = self.status.value
        d["result"] = None
        if self.result is not None:
            text = _json_text(self.result)
            if text is not None and len(text) <= NEWS_RESULT_LIMIT:
                d["result"] = json.loads(text)  # a copy, as ``asdict`` would make it
            else:
                d["result_truncated"] = True
        return d

    @classmethod
    def from_dict(cls, data: Any, *, shallow: bool = False) -> "JobRecord":
        """Decode a stored value. ``shallow``: the caller knows it nests no deeper than
        :data:`MAX_DEPTH` (:func:`shallow_json`), so the depth walk is skipped.

        Raises:
            ForeignRecord: a status this version does not know (a newer pyjobq's record).
            RecordError: anything else that is not a job record — a missing or mistyped field,
                a number that is not finite or out of range (``attempts`` or ``given_back``
                below 0, a count with a fraction), or a value
                nested deeper than :data:`MAX_DEPTH`. Never anything else, whatever ``data`` holds.
        """
        if not isinstance(data, Mapping):
            raise RecordError(f"a job record must be an object, got {type(data).__name__}")
        raw_id = data.get("id")
        name_id = raw_id if isinstance(raw_id, str) else repr(raw_id)[:80]
        if not shallow and depth(data, MAX_DEPTH + 1) > MAX_DEPTH + 1:  # the record is a level
            raise RecordError(f"job record {name_id!r} nests deeper than {MAX_DEPTH} levels")
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise RecordError(f"job record {name_id!r} is missing {', '.join(missing)}")
        raw_status = data["status"]
        if not isinstance(raw_status, str):
            raise RecordError(f"job record {name_id!r} has status={raw_status!r}, expected str")
        try:
            status = Status(raw_status)
        except ValueError:
            raise ForeignRecord(f"job record {name_id!r} has unknown status {raw_status!r}"
                                " (a newer pyjobq's?)") from None
        for name, kinds in _FIELD_TYPES.items():
            if name not in data:
                continue  # a required field was reported missing above; the rest have defaults
            value = data[name]
            if value is None and name in _OPTIONAL:
                continue
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise RecordError(
                    f"job record {name_id!r} has {name}={value!r}, expected "
                    + " or ".join(k.__name__ for k in kinds)
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise RecordError(
                    f"job record {name_id!r} has {name}={value!r}, expected a finite number")
            if name in _COUNTS and isinstance(value, (int, float)) and value != int(value):
                raise RecordError(
                    f"job record {name_id!r} has {name}={value!r}, expected a whole number")
        known = _STORED_SET
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = status
        for name in _COUNTS:
            if isinstance(values.get(name), float):
                values[name] = int(values[name])
        # A negative count would let a job past its ceiling (``attempts: -3, max_attempts: 1`` was
        # sent four times). One at or above its ceiling is harmless: the claim fails it unrun.
        if values["attempts"] < 0 or values.get("given_back", 0) < 0 \
                or values.get("cut_short", 0) < 0:
            raise RecordError(
                f"job record {name_id!r} has attempts={values['attempts']!r}, "
                f"given_back={values.get('given_back', 0)!r}, "
                f"cut_short={values.get('cut_short', 0)!r}: expected counts >= 0")
        unknown = {k: v for k, v in data.items() if k not in known and isinstance(k, str)}
        return cls(**values, unknown_fields=unknown)


def malformed(raw: Any, reason: Exception, now: float) -> "JobRecord":
    """A stored value that is not a job record, as a failed record keeping that value.

    Skipping it would leave it in the indexes for ever, where a pass trips over it on every
    look; failing it in one write takes it out of the due index and shows it, with its raw
    value under ``_params`` (or, when that cannot be stored, a short description of it), to
    whoever inspects the queue (spec: "Startup and cleanup": failed records are kept until
    delete_job). Never raises, whatever ``raw`` holds.
    """
    data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    raw_id = data.get("id")
    try:
        kept = check_json(raw, "the stored value")
    except InvalidJobError:
        kept = _SAFE_REPR.repr(raw)

    def text(name: str, default: str | None) -> str | None:
        value = data.get(name)
        return value if isinstance(value, str) and value else default

    created = data.get("created_at")
    ok_created = (isinstance(created, (int, float)) and not isinstance(created, bool)
                  and math.isfinite(created))
    return JobRecord(
        id=raw_id if isinstance(raw_id, str) and raw_id else _SAFE_REPR.repr(raw_id),
        type=text("type", "malformed") or "malformed",
        status=Status.FAILED,
        attempts=0,
        max_attempts=1,
        created_at=float(created) if ok_created and created is not None else now,
        updated_at=now,
        _reconstructor="malformed",
        _params=kept,
        group=text("group", None),
        label=text("label", None),
        error=f"malformed job record, failed so the queue runs on "
              f"(its stored value is kept under _params): {reason}",
        code=MALFORMED,
    )


#: The code of a record failed because its stored value is not a job record (by this name in
#: the outbox and the IndexedDB store).
MALFORMED = Code.MALFORMED_RECORD
#: The largest ``result`` (as JSON text) a ``job-update`` carries; a bigger one is read from
#: the store.
NEWS_RESULT_LIMIT = 16 * 1024
_COUNTS = ("attempts", "max_attempts", "given_back", "cut_short", "http_status")
_SAFE_REPR = reprlib.Repr()
_SAFE_REPR.maxlevel = 4
_SAFE_REPR.maxstring = 200
_SAFE_REPR.maxother = 200


def _json_text(value: Any) -> str | None:
    """``value`` as JSON text; None when it is not JSON (never stored so: it goes unsent)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return None


# dataclasses.MISSING, without importing a private name
_MISSING_DEFAULT = fields(NewJob)[0].default
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "type": (str,),
    "attempts": (int, float),
    "max_attempts": (int, float),
    "created_at": (int, float),
    "updated_at": (int, float),
    "_reconstructor": (str,),
    "group": (str,),
    "label": (str,),
    "next_retry_at": (int, float),
    "error": (str,),
    "http_status": (int, float),
    "code": (str,),
    "given_back": (int, float),
    "cut_short": (int, float),
    "yield_lock": (str,),
    "owner": (str,),
    "key": (str,),
    "timeout_ms": (int, float),
    "unauthorized_since": (int, float),
}
_OPTIONAL = frozenset({"group", "label", "next_retry_at", "error", "http_status", "code",
                       "yield_lock", "owner", "key", "timeout_ms", "unauthorized_since"})


@dataclass(frozen=True)
class RunResult:
    """A page's answer to ``run``: the fields of the ``run_result`` message."""

    ok: bool
    result: Any = None
    error: str | None = None
    status: int | None = None
    code: str | None = None
    terminal: bool = False
    interrupted: bool = False
    #: The page's word on whether it was offline when the attempt failed; None: it did not say.
    offline: bool | None = None
    #: The wait the server asked for (``Retry-After`` of a 429 or 503), in ms; None: none.
    retry_after_ms: float | None = None

    @classmethod
    def from_message(cls, data: Mapping[str, Any]) -> "RunResult":
        """The outcome a ``run_result`` message says.

        ``ok`` is checked by the message schema (:data:`pyjobq.core.messages.SCHEMA`); any
        other field of the wrong type reads as not said (an older page, or a malformed one).
        A success whose result cannot be stored reads as a terminal failure with the code
        ``result_not_storable``: running it again would give the same result.
        """
        offline = data.get("offline")
        outcome = cls(
            ok=data["ok"] is True,
            result=data.get("result"),
            error=_optional_str(data.get("error")),
            status=_optional_int(data.get("status")),
            code=_optional_str(data.get("code")),
            terminal=data.get("terminal") is True,
            interrupted=data.get("interrupted") is True,
            offline=offline if isinstance(offline, bool) else None,
            retry_after_ms=wait_ms(data.get("retry_after_ms")),
        )
        if outcome.ok:
            try:
                check_json(outcome.result, "the executor's result")
            except InvalidJobError as exc:
                # Storable means storable: running it again would give the same result.
                return cls(ok=False, error=str(exc), status=outcome.status,
                           code=Code.RESULT_NOT_STORABLE, terminal=True)
        return outcome


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def wait_ms(value: Any) -> float | None:
    """``value`` as a wait in ms (a finite number >= 0, never a bool), else None: what a
    ``run_result``'s ``retry_after_ms`` may carry."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _optional_int(value: Any) -> int | None:
    # A bool is an int to isinstance, never an HTTP status.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: JobRecord's stored fields, in order; those a job-update carries; those a stored value must have.
_STORED = tuple(f.name for f in fields(JobRecord) if f.name != "unknown_fields")
_STORED_SET = frozenset(_STORED)
_SUMMARY = tuple(name for name in _STORED if name not in ("_params", "result"))
# Every field read in one C call (a dict comprehension of getattr was a burst's hot spot).
_get_stored = operator.attrgetter(*_STORED)
_get_summary = operator.attrgetter(*_SUMMARY)
_REQUIRED = tuple(f.name for f in fields(JobRecord)
                  if f.default is _MISSING_DEFAULT and f.default_factory is _MISSING_DEFAULT)
