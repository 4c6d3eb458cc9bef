"""A tiny registry of running services: the queue registers itself as ``job-queue``
(:data:`JOB_QUEUE`)."""

from __future__ import annotations

from typing import Any, Callable

JOB_QUEUE = "job-queue"
"""The name the job queue registers under (spec: "The queue registers as the job-queue service")."""

_services: dict[str, Any] = {}
_watchers: dict[str, list[Callable[[Any], None]]] = {}


def register(name: str, service: Any) -> None:
    """Register ``service`` under ``name``, replacing whatever was registered there; each
    :func:`when_registered` callback of ``name`` is called with it."""
    _services[name] = service
    for callback in list(_watchers.get(name, ())):
        callback(service)


def get(name: str) -> Any:
    """The service registered under ``name``; ``KeyError`` naming it when there is none."""
    try:
        return _services[name]
    except KeyError:
        raise KeyError(f"no service {name!r} is registered;"
                       " import pyjobq.queue to start the job queue") from None


def unregister(name: str) -> None:
    """Forget the service registered under ``name``; harmless when there is none."""
    _services.pop(name, None)


def when_registered(name: str, callback: Callable[[Any], None]) -> None:
    """Call ``callback(service)`` with the service of ``name``: now if one is registered, and
    whenever one is registered under it. What lets a part that the queue must not import
    (``@pyjobq.periodic``, which imports the queue's own parts) learn that it started."""
    _watchers.setdefault(name, []).append(callback)
    if name in _services:
        callback(_services[name])
