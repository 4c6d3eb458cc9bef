"""The built-in ``fetch`` reconstructor: replay a stored {method, path, body} through the transport.

The transport is the application's: it builds the URL, adds credentials and
returns the *unread* Response, including non-ok ones. It is called as
``transport(method, path, body)``; one that takes a fourth argument named ``signal``
(or any fourth required one, or ``*args``) also gets the run's
:class:`~pyjobq.AbortSignal`, fired when the job is deleted, cancelled or its worker
stops — hand it on to ``fetch`` so the request ends with the run; the run is then waited for, up to
a grace, before its job's type runs the next job. One that takes an ``idempotency_key`` keyword gets
the job's id, the same on every replay, so a server can recognise a request it already applied (send
it as an ``Idempotency-Key`` header). That keeps the retry policy in one place: a non-ok response
becomes an :class:`~pyjobq.HTTPError` carrying ``status`` and ``body``, and the policy reads the
status to tell "later" from "never". The transport is looked up on every replay, never captured, so
a job that waits hours runs with the credentials of the moment.

Runs on the page only, where the transport and its credentials are: the scheduler worker
stores the job and hands its run to the page, it never calls the transport.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections.abc import Mapping
from typing import Any, Awaitable, Callable

from ..abort import AbortSignal
from ..core.backoff import retry_after_ms
from ..core.codes import Code
from ..core.errors import HTTPError, JobError, NoTransportError, Terminal
from .current import current_job_id


def code_from_body(body: Any) -> str | None:
    """A JSON body's top-level ``code``, or its ``error.code``; None otherwise."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return None
    if not isinstance(body, dict):
        return None
    code = body.get("code")
    if code is None and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
    return code if isinstance(code, str) else (str(code) if isinstance(code, int) else None)


async def read_response(response: Any) -> tuple[int, bool, str]:
    """(status, ok, text) of a JS ``Response``, a ``pyodide.http.FetchResponse`` or a
    :class:`pyjobq.testing.Response`; anything else raises a :class:`JobError`."""
    status = getattr(response, "status", None)
    if isinstance(status, bool) or not isinstance(status, int):
        raise JobError(
            f"the transport returned {type(response).__name__}, not a Response: return the "
            "unread response of your fetch call (js Response or pyodide.http.FetchResponse)",
            code=Code.BAD_TRANSPORT_RESULT,
        )
    ok = getattr(response, "ok", None)
    ok = (200 <= status < 300) if ok is None else bool(ok)
    reader = getattr(response, "text", None) or getattr(response, "string", None)
    text = await reader() if reader is not None else ""
    return status, ok, "" if text is None else str(text)


class Answer:
    """An executor's result with the HTTP status it came with (what ``run_result`` carries)."""

    __slots__ = ("result", "status")

    def __init__(self, result: Any, status: int | None = None) -> None:
        self.result = result
        self.status = status


def header(response: Any, name: str) -> str | None:
    """A response header's value, or None: a JS ``Response``'s ``Headers`` (read with ``get``,
    whose names are case-insensitive), or a mapping (``pyodide.http.FetchResponse.headers``,
    :class:`pyjobq.testing.Response`), read whatever the case of its names."""
    headers = getattr(response, "headers", None)
    if isinstance(headers, Mapping):
        wanted = name.lower()
        value = next((v for k, v in headers.items()
                      if isinstance(k, str) and k.lower() == wanted), None)
    else:
        try:
            value = headers.get(name) if headers is not None else None
        except Exception:  # a headers object that cannot be read says nothing
            return None
    return value if isinstance(value, str) else None


def _parse(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


class _Takes:
    __slots__ = ("signal_positional", "signal_keyword", "idempotency_key")

    def __init__(self, signal_positional: bool = False, signal_keyword: bool = False,
                 idempotency_key: bool = False) -> None:
        self.signal_positional = signal_positional
        self.signal_keyword = signal_keyword
        self.idempotency_key = idempotency_key


def _takes(transport: Any) -> _Takes:
    """What a transport accepts beyond (method, path, body). Three arguments stay three: a
    transport written before the signal was offered is called exactly as it always was.

    The transport is read on every replay; what its signature says is worked out once per
    transport (``inspect.signature`` cost more than the rest of a replay's Python)."""
    try:
        return _takes_cached(transport)
    except TypeError:  # unhashable: worked out each time
        return _read_takes(transport)


@functools.lru_cache(maxsize=64)
def _takes_cached(transport: Any) -> _Takes:
    return _read_takes(transport)


def _read_takes(transport: Any) -> _Takes:
    try:
        sig = inspect.signature(transport)
    except (TypeError, ValueError):  # a JavaScript function, a builtin: the three arguments
        return _Takes()
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_positional = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    fourth = positional[3] if len(positional) > 3 else None
    signal_positional = var_positional or (
        fourth is not None
        and (fourth.name == "signal" or fourth.default is inspect.Parameter.empty))
    signal_keyword = not signal_positional and "signal" in named
    return _Takes(signal_positional, signal_keyword, "idempotency_key" in named or var_keyword)


def make_fetch(
        get_transport: Callable[[], Callable[..., Awaitable[Any]] | None],
        now: Callable[[], float] = lambda: time.time() * 1000.0) -> Callable[[Any], Any]:
    """The factory registered under ``fetch``: params ``{method, path, body}`` → executor.
    ``now``: the page's clock, in ms, which an HTTP-date ``Retry-After`` is counted from."""

    def factory(params: Any) -> Callable[[AbortSignal], Awaitable[Any]]:
        if not isinstance(params, dict) or not isinstance(params.get("method"), str) \
                or not isinstance(params.get("path"), str):
            raise ValueError(f"fetch params must be {{method, path, body}}, got {params!r}")

        async def run(signal: AbortSignal) -> Any:
            transport = get_transport()
            if transport is None:
                raise NoTransportError()
            args: list[Any] = [params["method"], params["path"], params.get("body")]
            kw: dict[str, Any] = {}
            takes = _takes(transport)
            if takes.signal_positional:
                args.append(signal)
            elif takes.signal_keyword:
                kw["signal"] = signal
            if takes.signal_positional or takes.signal_keyword:
                signal.heeded = True  # the transport ends the request when the run is dropped
            if takes.idempotency_key:
                kw["idempotency_key"] = current_job_id()
            answer = transport(*args, **kw)
            if not inspect.isawaitable(answer):
                # A plain function's Response: calling it again would do the same.
                name = getattr(transport, "__qualname__", None) or repr(transport)
                raise Terminal(
                    f"the transport {name!r} returned {type(answer).__name__}, not an "
                    "awaitable: define it with 'async def' (or have it return an awaitable "
                    "of the unread response)", code=Code.TRANSPORT_NOT_ASYNC)
            response = await answer
            status, ok, text = await read_response(response)
            if not ok:
                code = code_from_body(text)
                raise HTTPError(
                    f"{params['method']} {params['path']} answered {status}"
                    + (f" ({code})" if code else ""),
                    status=status, body=text, code=code,
                    retry_after_ms=retry_after_ms(header(response, "Retry-After"), now()),
                )
            return Answer(_parse(text), status)

        return run

    return factory
