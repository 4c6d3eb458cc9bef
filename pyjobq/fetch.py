"""The built-in ``fetch`` reconstructor: replay a stored {method, path, body} through the transport.

The transport is the application's: it builds the URL, adds credentials and
returns the *unread* Response, including non-ok ones. That keeps the retry
policy in one place: a non-ok response becomes an :class:`~pyjobq.HTTPError`
carrying ``status`` and ``body``, and the policy reads the status to tell
"later" from "never". The transport is looked up on every replay, never
captured, so a job that waits hours runs with the credentials of the moment.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from .abort import AbortSignal
from .errors import HTTPError, JobError, NoTransportError

FETCH = "fetch"


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
            code="bad_transport_result",
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


def _parse(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def make_fetch(get_transport: Callable[[], Callable[..., Awaitable[Any]] | None]) -> Callable[[Any], Any]:
    """The factory registered under ``fetch``: params ``{method, path, body}`` → executor."""

    def factory(params: Any) -> Callable[[AbortSignal], Awaitable[Any]]:
        if not isinstance(params, dict) or not isinstance(params.get("method"), str) \
                or not isinstance(params.get("path"), str):
            raise ValueError(f"fetch params must be {{method, path, body}}, got {params!r}")

        async def run(signal: AbortSignal) -> Any:
            transport = get_transport()
            if transport is None:
                raise NoTransportError()
            response = await transport(params["method"], params["path"], params.get("body"))
            status, ok, text = await read_response(response)
            if not ok:
                code = code_from_body(text)
                raise HTTPError(
                    f"{params['method']} {params['path']} answered {status}"
                    + (f" ({code})" if code else ""),
                    status=status, body=text, code=code,
                )
            return Answer(_parse(text), status)

        return run

    return factory
