"""``@pyjobq.task``: a job kind declared as a decorated ``async def``, as in RQ, huey or Celery.

Theory of operation
-------------------
A task is a reconstructor (spec: "Rebuilding a closure after reload") written for you: the
decorator registers, under the task's stable name (``module:qualname``, or ``name=``), a
factory that rebuilds the call from the stored ``params`` — the arguments given to
``enqueue``, as ``{"args": [...], "kwargs": {...}}``. So a persistent task's job survives a
hard reload like any persistent job: the page that picks it up runs it if its code defines
the task, and fails it as ``orphaned`` (naming the task) if not. ``persistent=False`` makes a
volatile task: ``enqueue`` hands the queue a closure over the arguments, which lives only in
this tab.

Importing this module imports neither :mod:`pyjobq.queue` nor reads the configured names, so
``@pyjobq.task`` may run before :func:`pyjobq.configure` and before the queue starts: the
reconstructor goes into the settings (a queue started later reads it there) and, once the
queue runs, into it at once (:func:`pyjobq.config.add_reconstructor`). The queue is imported
by ``enqueue``, as any enqueue call would.

Typing
------
``mypy`` sees ``f.enqueue``'s parameters: a wrong or missing argument is a type error. That
takes one decision: **the job's** :class:`~pyjobq.AbortSignal` **is the task function's first
parameter**, ``async def save(signal, doc_id: str, text: str)``, and ``save.enqueue(doc_id,
text)`` takes the rest. PEP 612 can take only *leading positional* parameters off a
``ParamSpec`` (``Concatenate[AbortSignal, P]``): a keyword-only ``signal`` (``async def f(*args,
signal, **kwargs)``) cannot be dropped from what ``enqueue`` accepts, an optional ``signal=None``
keyword would show up among ``enqueue``'s parameters, and a context accessor would hide from the
signature that the job can be aborted. Signal first is also the shape every pyjobq executor
already has (``async def run(signal)``): a task is that executor with arguments after it.

Enqueue options (``type``, ``group``, ``label``, ``max_attempts``) are the decorator's, and a
call's own options — ``key`` (a pending job with the same key is replaced), ``delay_ms``, or
other defaults — go through :meth:`Task.options`, which returns the task with them set:
``save.options(key="doc-1", delay_ms=500).enqueue("doc-1", text)``. PEP 612 forbids keyword
parameters between ``*args: P.args`` and ``**kwargs: P.kwargs``, so ``enqueue(..., key=)``
cannot be typed next to the task's own arguments (and would collide with a task argument
called ``key``); ``options(...)`` keeps both typed.
"""

from __future__ import annotations

import dataclasses
import inspect
import reprlib
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)

from .. import config as _config
from ..abort import AbortSignal
from ..core.decorated import check_signal_first
from ..core.errors import ConfigurationError, InvalidJobError
from ..core.records import BUILT_IN_KINDS, DEFAULT_MAX_ATTEMPTS, stored_json

if TYPE_CHECKING:
    from ..handle import Job

__all__ = ["Task", "TaskQueue", "task"]

P = ParamSpec("P")
R = TypeVar("R")


class TaskQueue(Protocol):
    """Where :meth:`Task.enqueue` files its jobs: ``pyjobq``'s queue (the default), or a test
    tab's (:attr:`pyjobq.testing.Tab.queue`), given with :meth:`Task.options`."""

    def enqueue_persistent(self, reconstructor: str, params: Any = None, *, type: str = ...,
                           group: str | None = ..., label: str | None = ...,
                           max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                           delay_ms: float = ..., key: str | None = ...,
                           timeout_s: float | None = ...) -> Job: ...

    def enqueue(self, executor: Callable[[AbortSignal], Any], *, id: str | None = ...,
                type: str = ..., label: str | None = ...,
                max_attempts: int = DEFAULT_MAX_ATTEMPTS, key: str | None = ...,
                timeout_s: float | None = ...) -> Job: ...


@dataclasses.dataclass(frozen=True)
class _Options:
    type: str
    max_attempts: int
    label: str | None
    group: str | None
    key: str | None = None
    delay_ms: float = 0
    queue: TaskQueue | None = None
    #: Each attempt's bound in seconds; None: the configured one.
    timeout: float | None = None


#: Every task declared in this Python process, by name (the reconstructors they registered).
_tasks: dict[str, "Task[Any, Any]"] = {}


class Task(Generic[P, R]):
    """A job kind made from an ``async def`` by :func:`task`.

    Attributes:
        name: its stable name (``module:qualname``, or the decorator's ``name=``): the
            reconstructor its persistent jobs are stored under.
        persistent: False for a volatile task (its jobs live only in this tab).
        fn: the decorated function.

    ``await save(signal, *args)`` calls the function now, in this task (no queue: for tests);
    :meth:`enqueue` queues it.
    """

    def __init__(self, fn: Callable[Concatenate[AbortSignal, P], Awaitable[R]], *, name: str,
                 persistent: bool, options: _Options) -> None:
        self.fn = fn
        self.name = name
        self.persistent = persistent
        self._options = options
        self._signature = inspect.signature(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, signal: AbortSignal, /, *args: P.args,
                 **kwargs: P.kwargs) -> Awaitable[R]:
        return self.fn(signal, *args, **kwargs)

    def options(
        self,
        *,
        key: str | None = None,
        delay_ms: float | None = None,
        type: str | None = None,
        group: str | None = None,
        label: str | None = None,
        max_attempts: int | None = None,
        queue: TaskQueue | None = None,
        timeout: float | None = None,
    ) -> Task[P, R]:
        """This task with options for the calls made through it; each None keeps the task's.

        Args:
            key: a persistent job with this key still pending (or waiting out its delay) is
                replaced by the new one, in one transaction; one running keeps running and
                the new one waits behind it in its lane.
            delay_ms: wait this long before the first try (a persistent task only).
            type, group, label, max_attempts, timeout: override the decorator's defaults.
            queue: file on this queue instead of ``pyjobq``'s (a test's
                :attr:`pyjobq.testing.Tab.queue`).

        Returns:
            A :class:`Task` whose :meth:`enqueue` uses them; the task itself is unchanged.

        Raises:
            InvalidJobError: an option of the wrong type or range.
        """
        changes: dict[str, Any] = {}
        if key is not None:
            changes["key"] = _text(key, "key", f"{self.name}.options")
        if delay_ms is not None:
            if (isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float))
                    or not delay_ms >= 0):
                raise InvalidJobError(
                    f"{self.name}.options(delay_ms): expected a number of milliseconds >= 0, "
                    f"got {delay_ms!r}")
            if not self.persistent and delay_ms:
                raise InvalidJobError(
                    f"{self.name}.options(delay_ms): task {self.name!r} is volatile "
                    "(persistent=False) and volatile jobs run at once; declare it "
                    "persistent to delay it")
            changes["delay_ms"] = delay_ms
        if type is not None:
            changes["type"] = _text(type, "type", f"{self.name}.options")
        if group is not None:
            if not self.persistent:
                raise InvalidJobError(
                    f"{self.name}.options(group): task {self.name!r} is volatile "
                    "(persistent=False); groups are for persistent jobs (delete_group)")
            changes["group"] = _text(group, "group", f"{self.name}.options")
        if label is not None:
            changes["label"] = _text(label, "label", f"{self.name}.options")
        if max_attempts is not None:
            changes["max_attempts"] = _attempts(max_attempts, f"{self.name}.options")
        if queue is not None:
            changes["queue"] = queue
        if timeout is not None:
            changes["timeout"] = _config.timeout_or_none(f"{self.name}.options(timeout)", timeout,
                                                 InvalidJobError)
        bound: Task[P, R] = Task(self.fn, name=self.name, persistent=self.persistent,
                                 options=dataclasses.replace(self._options, **changes))
        return bound

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Queue a call of the task with these arguments; returns its :class:`~pyjobq.Job`.

        A persistent task's arguments are stored with the job, so each must be JSON's own
        (dict with str keys, list, str, int, float, bool, None) and come back equal; a
        volatile task's stay in this tab's memory and may be anything.

        Raises:
            InvalidJobError: the arguments do not fit the function's parameters, or one
                cannot be stored (the error names it).
        """
        try:
            bound = self._signature.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise InvalidJobError(
                f"{self.name}.enqueue(): the arguments do not fit {self.fn.__qualname__}"
                f"{self._signature}: {exc} (the first parameter is the job's AbortSignal, "
                "given by the queue)") from None
        options = self._options
        queue = options.queue if options.queue is not None else _default_queue()
        if not self.persistent:
            fn = self.fn

            def run(signal: AbortSignal) -> Awaitable[R]:
                return fn(signal, *args, **kwargs)

            return queue.enqueue(run, type=options.type, label=options.label,
                                 max_attempts=options.max_attempts, key=options.key,
                                 timeout_s=options.timeout)
        self._check_storable(bound)
        params = {"args": list(args), "kwargs": dict(kwargs)}
        return queue.enqueue_persistent(
            self.name, params, type=options.type, group=options.group, label=options.label,
            max_attempts=options.max_attempts, delay_ms=options.delay_ms, key=options.key,
            timeout_s=options.timeout)

    def _check_storable(self, bound: inspect.BoundArguments) -> None:
        parameters = self._signature.parameters
        for index, (name, value) in enumerate(bound.arguments.items()):
            if index == 0:
                continue  # the signal's place
            kind = parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                for i, item in enumerate(value):
                    self._storable(item, f"*{name}[{i}]")
            elif kind is inspect.Parameter.VAR_KEYWORD:
                for keyword, item in value.items():
                    self._storable(item, keyword)
            else:
                self._storable(value, name)

    def _storable(self, value: Any, argument: str) -> None:
        # Each argument on its own, so the error names it (enqueue_persistent checks the whole).
        stored_json(value, f"{self.name}.enqueue(): argument {argument!r}",
                    instead=", or declare the task with persistent=False to keep its arguments "
                            "in this tab's memory")

    def factory(self, params: Any) -> Callable[[AbortSignal], Awaitable[R]]:
        """The task's reconstructor: the call stored in ``params``, ready to run."""
        if not (isinstance(params, dict) and isinstance(params.get("args"), list)
                and isinstance(params.get("kwargs"), dict)):
            raise InvalidJobError(
                f"task {self.name!r}: the job's stored params are not the "
                f"{{'args': [...], 'kwargs': {{...}}}} enqueue stores: {reprlib.repr(params)}")
        args, kwargs, fn = params["args"], params["kwargs"], self.fn

        def run(signal: AbortSignal) -> Awaitable[R]:
            return fn(signal, *args, **kwargs)

        return run

    def __repr__(self) -> str:
        kind = "persistent" if self.persistent else "volatile"
        return f"<pyjobq.Task {self.name!r} {kind}>"


def _default_queue() -> TaskQueue:
    from .. import queue  # the queue starts on its first use, as with any enqueue call

    return queue


def _text(value: Any, option: str, call: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidJobError(f"{call}({option}): expected a non-empty str, got {value!r}")
    return value


def _attempts(value: Any, call: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJobError(f"{call}(max_attempts): expected an int >= 1, got {value!r}")
    return value


@overload
def task(fn: Callable[Concatenate[AbortSignal, P], Awaitable[R]], /) -> Task[P, R]: ...


@overload
def task(
    *,
    name: str | None = None,
    type: str = "default",
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    label: str | None = None,
    group: str | None = None,
    persistent: bool = True,
    timeout: float | None = None,
) -> Callable[[Callable[Concatenate[AbortSignal, P], Awaitable[R]]], Task[P, R]]: ...


def task(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    type: str = "default",
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    label: str | None = None,
    group: str | None = None,
    persistent: bool = True,
    timeout: float | None = None,
) -> Any:
    """Declare a job kind: ``@pyjobq.task`` or ``@pyjobq.task(type="saves", ...)`` over an
    ``async def f(signal, *args, **kwargs)``.

    The function's first parameter receives the job's :class:`~pyjobq.AbortSignal` (see the
    module's "Typing" for why it comes first); the rest are what ``f.enqueue(...)`` takes —
    type checkers check them. Its return value (JSON-like) is the job's result.

    Args:
        name: the name its jobs are stored under; default ``module:qualname``. Keep it stable:
            jobs stored under a name no page defines any more fail as ``orphaned``.
        type, max_attempts, label, group: the enqueue options its jobs get unless
            :meth:`Task.options` says otherwise (``label`` defaults to the function's name).
        persistent: True (default): jobs are stored and survive a reload; False: volatile
            jobs, run only by this tab, through :func:`pyjobq.enqueue` (no ``group``, no delay).
        timeout: the longest one attempt of its jobs may run, in seconds (``timeout_s`` of
            :func:`pyjobq.enqueue_fetch`: past it the attempt fails ``timeout`` and is
            retried); None: ``configure(timeout_s=)``'s, by default no bound.

    Importing it reads no configured names and starts no queue: declare tasks before
    :func:`pyjobq.configure` or after, before the queue starts or while it runs. Declaring a
    task again under the same name from the same function (a notebook cell run again, a module
    reloaded) replaces it.

    Returns:
        A :class:`Task`.

    Raises:
        ConfigurationError: ``fn`` is not an ``async def`` whose first parameter can take
            the signal, an option is of the wrong type, or the name is taken by another
            function (another ``module:qualname``) or by a reconstructor not made by a task.
    """
    def declare(fn: Callable[..., Any]) -> Task[Any, Any]:
        return _declare(fn, name=name, options=_Options(
            type=_declared(type, "type"), max_attempts=_declared_attempts(max_attempts),
            label=_declared(label, "label") if label is not None else _label(fn),
            group=_declared(group, "group") if group is not None else None,
            timeout=_config.timeout_or_none("@pyjobq.task(timeout=...)", timeout,
                                            ConfigurationError)),
            persistent=persistent)

    if fn is not None:
        return declare(fn)
    return declare


def _declared(value: Any, option: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"@pyjobq.task({option}=...): expected a non-empty str, "
                                 f"got {value!r}")
    return value


def _declared_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"@pyjobq.task(max_attempts=...): expected an int >= 1, "
                                 f"got {value!r}")
    return value


def _label(fn: Callable[..., Any]) -> str | None:
    label = getattr(fn, "__name__", None)
    return label if isinstance(label, str) and label else None


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', None)}:{getattr(fn, '__qualname__', None)}"


def _declare(fn: Callable[..., Any], *, name: str | None, options: _Options,
             persistent: bool) -> Task[Any, Any]:
    check_signal_first(fn, decorator="@pyjobq.task", kind="task", arguments=True,
                       error=ConfigurationError)
    if not isinstance(persistent, bool):
        raise ConfigurationError(f"@pyjobq.task(persistent=...): expected True or False, "
                                 f"got {persistent!r}")
    if not persistent and options.group is not None:
        raise ConfigurationError(
            f"@pyjobq.task(group={options.group!r}, persistent=False): groups are for "
            "persistent jobs (delete_group); drop group= or keep the task persistent")
    origin = _origin(fn)
    if name is None and not isinstance(getattr(fn, "__qualname__", None), str):
        raise ConfigurationError(
            f"@pyjobq.task: {fn!r} has no __qualname__ to name its jobs by; give it one with "
            "@pyjobq.task(name=...)")
    if name is None:
        name = origin
    elif not isinstance(name, str) or not name:
        raise ConfigurationError(f"@pyjobq.task(name=...): expected a non-empty str, "
                                 f"got {name!r}")
    if name in BUILT_IN_KINDS:
        raise ConfigurationError(
            f"@pyjobq.task(name={name!r}): pyjobq uses that name for its own jobs; "
            "choose another")
    known = _tasks.get(name)
    if known is not None and _origin(known.fn) != origin:
        raise ConfigurationError(
            f"@pyjobq.task: the name {name!r} is already {_origin(known.fn)}'s; "
            f"{origin} cannot take it too (the queue would run either one's jobs as the "
            "other's). Give one of them another name=")
    registered = _config.settings().reconstructors.get(name)
    if known is None and registered is not None:
        raise ConfigurationError(
            f"@pyjobq.task: {name!r} is already a reconstructor given to "
            "pyjobq.configure(reconstructors=...); give the task another name=")
    declared: Task[Any, Any] = Task(fn, name=name, persistent=persistent, options=options)
    _tasks[name] = declared
    if persistent:
        _config.add_reconstructor(name, declared.factory, module=fn.__module__)
    return declared
