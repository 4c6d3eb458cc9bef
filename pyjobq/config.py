"""Name the queue before anything imports it (spec: "Naming").

The queue claims three names that are global to the browser origin: an
IndexedDB database, a ``navigator.locks`` name that elects the single
processor, and a BroadcastChannel. :mod:`pyjobq.queue` reads them when it is
first imported (it opens the channel then), so :func:`configure` lives here, in
a module that does not import the queue, and a call after that import raises:
changing names mid-session would make jobs under the original names unreachable.

Treat the three names as part of the storage format: changing them in a later
release also makes stored jobs unreachable.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from .core.errors import ConfigurationError

DEFAULT_DB_NAME = "ui-jobs"
DEFAULT_LOCK_NAME = "ui-job-processor"
DEFAULT_CHANNEL_NAME = "ui-jobs"

Transport = Callable[[str, str, Any], Any]
Factory = Callable[[Any], Callable[..., Any]]


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


_settings = Settings()
_explicit: set[str] = set()
_read_by: str | None = None
_UNSET: Any = object()


def configure(
    *,
    db_name: str = _UNSET,
    lock_name: str = _UNSET,
    channel_name: str = _UNSET,
    transport: Transport | None = _UNSET,
    reconstructors: Mapping[str, Factory] = _UNSET,
    yields: Mapping[str, str] = _UNSET,
    handshake_timeout_ms: float = _UNSET,
    pyodide_url: str | None = _UNSET,
    worker_url: str | None = _UNSET,
    worker_packages: Sequence[str] | None = _UNSET,
    worker_start_timeout_ms: float = _UNSET,
) -> None:
    """Set the queue's names and hooks. Call it in the first module your page loads.

    Args:
        db_name: IndexedDB database (default ``ui-jobs``).
        lock_name: Web Lock electing the one processing tab (default ``ui-job-processor``).
        channel_name: BroadcastChannel carrying ``job-update`` (default ``ui-jobs``).
        transport: ``async def send(method, path, body)`` returning the unread
            Response; called on every replay, so read credentials inside it.
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

    Omitted fields keep their value. It may be called more than once before the
    queue is imported, as long as no name is given two different values.

    Raises:
        ConfigurationError: the queue was already imported (a late call), a name
            is not a non-empty string, or a name would change.
    """
    global _settings
    if _read_by is not None:
        raise ConfigurationError(
            f"configure() was called after {_read_by} had already read the queue's names "
            f"(db {_settings.db_name!r}, lock {_settings.lock_name!r}, channel "
            f"{_settings.channel_name!r}). Changing them now would make queued jobs unreachable. "
            "Call configure() in the first module your page loads, before anything imports "
            "pyjobq.queue; to set the transport or add reconstructors later, use "
            "pyjobq.set_transport() and pyjobq.register_reconstructor()."
        )
    changes = _names(db_name=db_name, lock_name=lock_name, channel_name=channel_name)
    if transport is not _UNSET:
        check_transport(transport)
        changes["transport"] = transport
    if reconstructors is not _UNSET:
        changes["reconstructors"] = {**_settings.reconstructors, **_reconstructors(reconstructors)}
    if yields is not _UNSET:
        changes["yields"] = _yields(yields)
    if handshake_timeout_ms is not _UNSET:
        changes["handshake_timeout_ms"] = _positive_ms("handshake_timeout_ms", handshake_timeout_ms)
    urls: dict[str, Any] = {"pyodide_url": pyodide_url, "worker_url": worker_url}
    changes.update({name: _url(name, value) for name, value in urls.items() if value is not _UNSET})
    if worker_packages is not _UNSET:
        changes["worker_packages"] = _packages(worker_packages)
    if worker_start_timeout_ms is not _UNSET:
        changes["worker_start_timeout_ms"] = _positive_ms("worker_start_timeout_ms",
                                                          worker_start_timeout_ms)
    _settings = replace(_settings, **changes)
    _explicit.update(k for k in changes if k.endswith("_name"))


def _names(**names: Any) -> dict[str, Any]:
    """The queue's names given, checked: each a non-empty str, none changing once given."""
    changes: dict[str, Any] = {}
    for name, value in names.items():
        if value is _UNSET:
            continue
        if not isinstance(value, str) or not value:
            raise ConfigurationError(f"{name} must be a non-empty str, got {value!r}")
        current = getattr(_settings, name)
        if name in _explicit and value != current:
            raise ConfigurationError(
                f"{name} was already configured as {current!r}; refusing to change it to "
                f"{value!r}. Configure each name once, in the first module your page loads."
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


def check_reconstructor(name: Any, factory: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a reconstructor name must be a non-empty str, got {name!r}")
    if not callable(factory):
        raise ConfigurationError(
            f"reconstructor {name!r} must be a factory: params -> async executor, got {factory!r}"
        )


def settings() -> Settings:
    """The current settings, without reading them for good."""
    return _settings


def read(by: str) -> Settings:
    """Read the settings for good: later :func:`configure` calls raise."""
    global _read_by
    if _read_by is None:
        _read_by = by
    return _settings

