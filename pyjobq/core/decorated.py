"""The shape pyjobq's decorators take: an ``async def`` whose first parameter receives the job's
:class:`~pyjobq.AbortSignal` — ``@pyjobq.task``'s ``async def save(signal, doc_id)`` and
``@pyjobq.periodic``'s ``async def tidy(signal)`` — so users learn one convention (pyjobq/tasks.py's
"Typing" says why the signal comes first). Imports nothing but the core, so both decorators'
modules may use it.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from .errors import PyjobqError

__all__ = ["check_signal_first"]


def check_signal_first(fn: Callable[..., Any], *, decorator: str, kind: str, arguments: bool,
                       error: type[PyjobqError]) -> None:
    """Refuse ``fn`` unless it is an ``async def`` whose first parameter can take the job's
    :class:`~pyjobq.AbortSignal`: the shape of ``@pyjobq.task`` and of ``@pyjobq.periodic``.

    Args:
        decorator: how the error names the decorator (``"@pyjobq.task"``).
        kind: what the error calls the decorated function (``"task"``).
        arguments: whether arguments follow the signal (a task's, given to ``enqueue``).
        error: the decorator's error class.
    """
    write = "(signal, ...)" if arguments else "(signal): ..."
    if not inspect.iscoroutinefunction(fn):
        raise error(
            f"{decorator} needs an async def, got {fn!r}: write `async def "
            f"{getattr(fn, '__name__', 'f')}{write}`")
    parameters = list(inspect.signature(fn).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                  inspect.Parameter.VAR_POSITIONAL)
    if not parameters or parameters[0].kind not in positional:
        raise error(
            f"{decorator}: {fn.__qualname__}'s first parameter receives the job's "
            f"AbortSignal; write `async def {fn.__name__}{write}`"
            + (" (the arguments enqueue() takes come after it)" if arguments else ""))
    if parameters[0].name in ("self", "cls"):
        raise error(
            f"{decorator}: {fn.__qualname__} looks like a method (its first parameter is "
            f"{parameters[0].name!r}); a {kind}'s first parameter receives the job's AbortSignal "
            f"and its object cannot be stored with the job. Declare the {kind} as a module-level "
            "async def" + (" and pass what it needs as arguments" if arguments else ""))
