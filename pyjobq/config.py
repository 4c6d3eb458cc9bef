"""Name the queue before anything imports it (spec: "Naming").

The queue claims three names that are global to the browser origin: an
IndexedDB database, a ``navigator.locks`` name that elects the single
processor, and a BroadcastChannel. :mod:`pyjobq.queue` reads them when it is
first imported (it opens the channel then), so :func:`configure` lives here, in
a module that does not import the queue. After that import the names are fixed: a call
giving any of them another value raises, since changing names mid-session would make jobs
under the original names unreachable. A call that gives the same values again — a notebook
cell run a second time — is allowed: it changes nothing, except that a transport or
reconstructors it gives replace the old ones, as :func:`pyjobq.set_transport` and
:func:`pyjobq.register_reconstructor` would.

Treat the three names as part of the storage format: changing them in a later
release also makes stored jobs unreachable.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from .core.errors import ConfigurationError
from .core.mode import JOB_QUEUE, Mode
from .core.records import BUILT_IN_KINDS

DEFAULT_DB_NAME = "ui-jobs"
DEFAULT_LOCK_NAME = "ui-job-processor"
DEFAULT_CHANNEL_NAME = "ui-jobs"

Transport = Callable[[str, str, Any], Any]
Factory = Callable[[Any], Callable[..., Any]]


DAY_MS = 24 * 3600 * 1000.0


@dataclass(frozen=True)
class Settings:
    db_name: str = DEFAULT_DB_NAME
    lock_name: str = DEFAULT_LOCK_NAME
    channel_name: str = DEFAULT_CHANNEL_NAME
    yields: Mapping[str, str] = field(default_factory=dict)
    reconstructors: Mapping[str, Factory] = field(default_factory=dict)
    transport: Transport | None = None
    handshake_timeout_ms: float = 10_000.0
    #: Where the scheduler worker loads Pyodide from; None: the page's own distribution.
    pyodide_url: str | None = None
    #: A served copy of pyjobq's worker script (a CSP that forbids ``blob:`` workers);
    #: None: a Blob URL.
    worker_url: str | None = None
    #: What the worker installs with ``loadPackage``; None: the pyjobq files this page imported.
    worker_packages: tuple[str, ...] | None = None
    worker_start_timeout_ms: float = 60_000.0
    #: Reconstructor name -> the importable module that declares it (``@pyjobq.task`` s):
    #: what the Service Worker imports to run those jobs.
    reconstructor_modules: Mapping[str, str] = field(default_factory=dict)
    #: The URL of pyjobq's Service Worker script on the app's origin; None: no Service Worker.
    service_worker: str | None = None
    #: ``module:function`` of the transport, for the Service Worker to import; None: the
    #: transport is not importable by name (defined in ``__main__`` or inside a function).
    transport_path: str | None = None
    #: The longest one attempt of a job filed without a ``timeout_s`` of its own may run, in
    #: seconds; None: no bound.
    timeout_s: float | None = None
    #: How long a ``done`` record is kept, in days, before the lease holder sweeps it.
    keep_done_days: float = 7.0
    #: How long a ``failed`` record is kept, in days; None: until it is retried or deleted.
    keep_failed_days: float | None = None
    #: Ask the browser to persist the origin's storage once a job is stored.
    persist_storage: bool = True

    @property
    def mode(self) -> Mode:
        """The job queue's engine mode on these settings: its retention."""
        failed = None if self.keep_failed_days is None else self.keep_failed_days * DAY_MS
        return JOB_QUEUE.with_retention(self.keep_done_days * DAY_MS, failed)


_settings = Settings()
_explicit: set[str] = set()
_read_by: str | None = None
_UNSET: Any = object()


def configure(
    *,
    db_name: str = _UNSET,
    lock_name: str = _UNSET,
    channel_name: str = _UNSET,
    transport: Transport | str | None = _UNSET,
    reconstructors: Mapping[str, Factory] = _UNSET,
    yields: Mapping[str, str] = _UNSET,
    handshake_timeout_ms: float = _UNSET,
    pyodide_url: str | None = _UNSET,
    worker_url: str | None = _UNSET,
    worker_packages: Sequence[str] | None = _UNSET,
    worker_start_timeout_ms: float = _UNSET,
    service_worker: str | None = _UNSET,
    timeout_s: float | None = _UNSET,
    keep_done_days: float = _UNSET,
    keep_failed_days: float | None = _UNSET,
    persist_storage: bool = _UNSET,
) -> None:
    """Set the queue's names and hooks. Call it in the first module your page loads.

    Args:
        db_name: IndexedDB database (default ``ui-jobs``).
        lock_name: Web Lock electing the one processing tab (default ``ui-job-processor``).
        channel_name: BroadcastChannel carrying ``job-update`` (default ``ui-jobs``).
        transport: ``async def send(method, path, body)`` returning the unread
            Response; called on every replay, so read credentials inside it. Also its
            import path, ``"module:function"`` (``"app.transport:send"``): the Service Worker
            imports the transport by that name (a function defined in an importable module is
            found by its own name too).
        reconstructors: ``{name: factory}`` for persistent job kinds this page runs.
        yields: ``{job_type: lock_name}``: jobs of the type pause while that lock is held.
        handshake_timeout_ms: how long the scheduler waits for ``run_started``.
        pyodide_url: the Pyodide distribution (its folder URL, ending in ``/``) the scheduler
            worker loads. Default: the one this page's Pyodide came from, on whatever origin.
        worker_url: the URL of a served copy of pyjobq's worker script
            (``pyjobq/browser/worker.mjs`` in the wheel), for pages whose
            Content-Security-Policy forbids ``blob:`` workers. Default: a Blob URL.
        worker_packages: package names (from the distribution's lock) or wheel URLs the
            worker installs with ``loadPackage`` — e.g. a self-hosted pyjobq wheel. Default:
            the worker runs the very pyjobq files this page imported, however they got here.
        worker_start_timeout_ms: the longest the worker's boot may go without a step
            (a script that says nothing, a download that makes no progress, a Pyodide that
            never starts) before the page ends that worker, lets the processor lease go
            and starts a new one later (60 s; docs/troubleshooting.md).
        service_worker: the URL of pyjobq's Service Worker script served on the app's origin
            (``python -m pyjobq.service_worker > sw.mjs``): it sends the stored jobs when every
            tab is closed (docs/service-worker.md). Default None: only open tabs send them.
        timeout_s: the longest one attempt may run, for every job filed without a
            ``timeout_s`` (or ``@pyjobq.task(timeout=)``) of its own: past it, the run's signal
            aborts and the attempt fails with the code ``timeout``, retried like any failure.
            Default None: no bound.
        keep_done_days: how long a ``done`` record is kept before the processing tab deletes
            it (default 7, the spec's "Startup and cleanup").
        keep_failed_days: how long a ``failed`` record is kept before it is deleted the same
            way. Default None: a failed job stays until it is retried or deleted (nothing
            unfinished is ever swept).
        persist_storage: ask the browser to persist the origin's storage
            (``navigator.storage.persist()``) once the queue hears of a stored job, so the
            stored jobs are not evicted (WebKit deletes an origin's storage after days without
            a visit unless it is persisted; Firefox asks the user). Default True;
            ``queue.storage()`` says the state.

    Omitted fields keep their value. It may be called more than once, as long as no name is
    given two different values. Once the queue is imported (its settings read for good), a
    call that gives the same values again changes nothing — re-running a notebook cell is
    fine — except that a ``transport`` or ``reconstructors`` it gives replace the old ones,
    as :func:`pyjobq.set_transport` and :func:`pyjobq.register_reconstructor` would.

    Raises:
        ConfigurationError: a name is not a non-empty string, a name would change, or (once
            the queue is imported) any other setting would change; nothing is changed then.
    """
    global _settings
    changes = _names(db_name=db_name, lock_name=lock_name, channel_name=channel_name)
    if transport is not _UNSET:
        path = transport if isinstance(transport, str) else None
        if path is not None:
            transport = import_transport(path)
        check_transport(transport)
        changes["transport"] = transport
        changes["transport_path"] = path or transport_path(transport)
    if reconstructors is not _UNSET:
        changes["reconstructors"] = dict(_reconstructors(reconstructors))  # merged below
    if yields is not _UNSET:
        changes["yields"] = _yields(yields)
    if handshake_timeout_ms is not _UNSET:
        changes["handshake_timeout_ms"] = _positive_ms("handshake_timeout_ms", handshake_timeout_ms)
    urls: dict[str, Any] = {"pyodide_url": pyodide_url, "worker_url": worker_url,
                            "service_worker": service_worker}
    changes.update({name: _url(name, value) for name, value in urls.items() if value is not _UNSET})
    if worker_packages is not _UNSET:
        changes["worker_packages"] = _packages(worker_packages)
    if worker_start_timeout_ms is not _UNSET:
        changes["worker_start_timeout_ms"] = _positive_ms("worker_start_timeout_ms",
                                                          worker_start_timeout_ms)
    if timeout_s is not _UNSET:
        changes["timeout_s"] = timeout_or_none("timeout_s", timeout_s, ConfigurationError)
    if keep_done_days is not _UNSET:
        changes["keep_done_days"] = _days("keep_done_days", keep_done_days, none=False)
    if keep_failed_days is not _UNSET:
        changes["keep_failed_days"] = _days("keep_failed_days", keep_failed_days, none=True)
    if persist_storage is not _UNSET:
        if not isinstance(persist_storage, bool):
            raise ConfigurationError(
                f"persist_storage must be True or False, got {persist_storage!r}")
        changes["persist_storage"] = persist_storage
    if _read_by is not None:
        _configure_late(changes)
        return
    if "reconstructors" in changes:
        changes["reconstructors"] = {**_settings.reconstructors, **changes["reconstructors"]}
    _settings = replace(_settings, **changes)
    _explicit.update(k for k in changes if k.endswith("_name"))


#: The settings a call after the queue has read them may give again, and each value only
#: again: the worker and the channel already run on what was read.
_FIXED_ONCE_READ = ("db_name", "lock_name", "channel_name", "yields", "handshake_timeout_ms",
                    "pyodide_url", "worker_url", "worker_packages", "worker_start_timeout_ms",
                    "service_worker", "timeout_s", "keep_done_days", "keep_failed_days",
                    "persist_storage")


@dataclass(frozen=True)
class LateHooks:
    """How a :func:`configure` call after the queue read its settings reaches the running queue
    (given by :mod:`pyjobq.queue`, which this module must not import)."""

    set_transport: Callable[[Transport | None], None]
    register_reconstructor: Callable[[str, Factory], None]


_late: LateHooks | None = None


def accept_late(hooks: LateHooks) -> None:
    """Let :func:`configure` calls after :func:`read` replace the transport and reconstructors."""
    global _late
    _late = hooks


def _configure_late(changes: dict[str, Any]) -> None:
    """A call after the queue read the settings (a notebook cell run again): the same names and
    settings are a no-op, a transport or reconstructors replace the old ones, anything else
    raises and changes nothing."""
    global _settings
    differ = [name for name in _FIXED_ONCE_READ
              if name in changes and changes[name] != getattr(_settings, name)]
    if differ:
        wanted = ", ".join(f"{name}={changes[name]!r}" for name in differ)
        running = ", ".join(f"{name}={getattr(_settings, name)!r}" for name in differ)
        raise ConfigurationError(
            f"configure() was called with {wanted}, but the queue already runs with {running} "
            f"(read when {_read_by} was imported; db {_settings.db_name!r}, lock "
            f"{_settings.lock_name!r}, channel {_settings.channel_name!r}). The running queue "
            "and its worker were started on those (new names would make the stored jobs "
            "unreachable), so nothing was changed. To use other "
            "settings, restart the kernel (or reload the page) and call configure() with them "
            "before anything imports pyjobq.queue. Calling configure() again with the same "
            "settings is fine: a transport or reconstructors given again replace the old ones."
        )
    if "transport" in changes:
        if _late is not None:
            _late.set_transport(changes["transport"])
        _settings = replace(_settings, transport=changes["transport"],
                            transport_path=changes["transport_path"])
    if "reconstructors" in changes:
        # Only the names given in this call: one registered since by register_reconstructor()
        # (a later cell's fix) stays, unless this call names it again.
        if _late is not None:
            for name, factory in changes["reconstructors"].items():
                _late.register_reconstructor(name, factory)
        _settings = replace(_settings, reconstructors={**_settings.reconstructors,
                                                       **changes["reconstructors"]})


def _names(**names: Any) -> dict[str, Any]:
    """The queue's names given, checked: each a non-empty str, none changing once given."""
    changes: dict[str, Any] = {}
    for name, value in names.items():
        if value is _UNSET:
            continue
        if not isinstance(value, str) or not value:
            raise ConfigurationError(f"{name} must be a non-empty str, got {value!r}")
        current = getattr(_settings, name)
        if name in _explicit and value != current and _read_by is None:  # else: late
            raise ConfigurationError(
                f"{name} was already configured as {current!r}; refusing to change it to "
                f"{value!r}. Configure each name once, in the first module your page loads (in "
                "a notebook, in one cell run before anything imports pyjobq.queue); to use other "
                "names, reload the page — in a notebook, restart the kernel."
            )
        changes[name] = value
    return changes


def _reconstructors(reconstructors: Any) -> Mapping[str, Factory]:
    if not isinstance(reconstructors, Mapping):
        raise ConfigurationError(
            f"reconstructors must be a mapping of name to factory, got {reconstructors!r}")
    for key, factory in reconstructors.items():
        check_reconstructor(key, factory)
    return reconstructors


def _yields(yields: Any) -> dict[str, str]:
    if not isinstance(yields, Mapping) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in yields.items()
    ):
        raise ConfigurationError(
            f"yields must map job type (str) to lock name (str), got {yields!r}")
    return dict(yields)


def timeout_or_none(name: str, value: Any, error: type[Exception]) -> float | None:
    """``value`` as a timeout in seconds (a finite number > 0), or None for no bound.

    Raises:
        error: naming ``name``, for anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 < value < math.inf:
        raise error(f"{name} must be a finite number of seconds > 0, or None for no bound, "
                    f"got {value!r}")
    return float(value)


def _days(name: str, value: Any, *, none: bool) -> Any:
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 < value < math.inf:
        raise ConfigurationError(
            f"{name} must be a finite number of days > 0{', or None' if none else ''}, "
            f"got {value!r}")
    return float(value)


def _positive_ms(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"{name} must be a number > 0, got {value!r}")
    return float(value)


def _url(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{name} must be a non-empty URL str or None, got {value!r}")
    if name == "pyodide_url" and not value.endswith("/"):
        return value + "/"  # a folder: pyodide.mjs, the .wasm and the lock sit in it
    return value


def _packages(worker_packages: Any) -> tuple[str, ...] | None:
    if worker_packages is not None and (
        isinstance(worker_packages, str) or not isinstance(worker_packages, Sequence)
        or not worker_packages or not all(isinstance(p, str) and p for p in worker_packages)
    ):
        raise ConfigurationError(
            "worker_packages must be a non-empty list of package names or wheel URLs, or None, "
            f"got {worker_packages!r}"
        )
    return None if worker_packages is None else tuple(worker_packages)


def check_transport(transport: Any) -> None:
    if transport is not None and not callable(transport):
        raise ConfigurationError(
            "transport must be an async function (method, path, body) -> Response,"
            f" got {transport!r}"
        )


def import_transport(path: str) -> Transport:
    """The function ``"module:function"`` names, imported now.

    Raises:
        ConfigurationError: ``path`` is not ``module:function``, the module cannot be imported,
            or it has no such function.
    """
    module_name, colon, name = path.partition(":")
    if not colon or not module_name or not name:
        raise ConfigurationError(
            f"transport {path!r}: give the function itself, or its import path as "
            "'module:function' (e.g. 'app.transport:send')")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigurationError(
            f"transport {path!r}: importing {module_name!r} failed ({exc!r}); put the transport in "
            "a module this page can import (in a notebook or PyScript, a file beside the page "
            "loaded into the file system), or pass the function itself") from exc
    for part in name.split("."):
        if not hasattr(value, part):
            raise ConfigurationError(f"transport {path!r}: {module_name!r} has no {name!r}")
        value = getattr(value, part)
    if not callable(value):
        raise ConfigurationError(f"transport {path!r} names {value!r}, which is not a function")
    return value  # type: ignore[no-any-return]


def transport_path(transport: Any) -> str | None:
    """``module:qualname`` of a transport another context can import by name, or None (defined
    in ``__main__``, inside a function, or not a plain function)."""
    module = getattr(transport, "__module__", None)
    qualname = getattr(transport, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__" \
            or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def check_reconstructor(name: Any, factory: Any) -> None:
    """Raise :class:`ConfigurationError` unless ``factory`` may be registered as ``name``: a
    callable, under a name that is not one of pyjobq's own kinds."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a reconstructor name must be a non-empty str, got {name!r}")
    if name in BUILT_IN_KINDS:
        raise ConfigurationError(
            f"reconstructor {name!r}: pyjobq uses that name for its own jobs (fetch jobs, "
            "volatile jobs); choose another name (to change how fetch jobs are sent, give a "
            "transport: configure(transport=...) or set_transport())")
    if not callable(factory):
        raise ConfigurationError(
            f"reconstructor {name!r} must be a factory: params -> async executor, got {factory!r}"
        )


def add_reconstructor(name: str, factory: Factory, *, module: str | None = None) -> None:
    """Register reconstructor ``name`` whether or not the queue has read the settings, without
    starting it (``@pyjobq.task``): the settings hold it, so a queue started later has it, and
    a running one is given it at once. ``module``: the module that declares it, importable by
    another context (the Service Worker imports it to run the jobs)."""
    global _settings
    check_reconstructor(name, factory)
    modules = dict(_settings.reconstructor_modules)
    if module is not None and module != "__main__":
        modules[name] = module
    else:
        modules.pop(name, None)
    _settings = replace(_settings, reconstructors={**_settings.reconstructors, name: factory},
                        reconstructor_modules=modules)
    if _read_by is not None and _late is not None:
        _late.register_reconstructor(name, factory)


def settings() -> Settings:
    """The current settings, without reading them for good."""
    return _settings


def read(by: str) -> Settings:
    """Read the settings for good: later :func:`configure` calls raise."""
    global _read_by
    if _read_by is None:
        _read_by = by
    return _settings

