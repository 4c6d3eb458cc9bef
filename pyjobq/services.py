"""A tiny registry of running services: the queue registers itself as ``job-queue``."""

from __future__ import annotations

from typing import Any

_services: dict[str, Any] = {}


def register(name: str, service: Any) -> None:
    """Register ``service`` under ``name``, replacing whatever was registered there."""
    _services[name] = service


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
