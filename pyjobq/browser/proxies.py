"""Every proxy and event listener pyjobq's browser adapters make, counted while they live.

Theory of operation
-------------------
A Python callable handed to JavaScript must be a ``create_proxy`` that someone
``destroy``\\ s, and every ``addEventListener`` needs its removal (DESIGN.md,
"Proxies"; STYLE.md: "Every proxy and listener is released in the module that
made it"). A missed one leaks a little per job, which only shows after thousands
of jobs. So every module of this package makes its proxies with :func:`create`
and :func:`destroy`, and its listeners with :func:`listen`, and this module
keeps the count of those still live: :func:`counts` is what a test reads before
and after 10,000 jobs.

Pyodide itself can also trace every PyProxy it makes (its own, the WebLoop's,
the borrowed ones of a call): ``pyodide._module.enable_pyproxy_allocation_tracing()``
fills ``pyodide._module.pyproxy_alloc_map`` with each proxy made from then on
and removes it when destroyed. :func:`trace_pyodide_proxies` switches that on
(a debugging aid: it records a stack per proxy), and :func:`counts` then reports
its size as ``pyodide_proxies``. It only sees proxies made after tracing began,
and a proxy reclaimed by the garbage collector instead of ``destroy`` stays in
it — which is the point: pyjobq must destroy what it makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from pyodide.ffi import create_proxy

from ..core.messages import make

if TYPE_CHECKING:  # the worker imports this module: it must not load the page's side
    from ..executor.side import ExecutorSide

_live_proxies: dict[int, Any] = {}
_live_listeners = 0
_tracing = False


def create(fn: Callable[..., Any]) -> Any:
    """``create_proxy(fn)``, counted until :func:`destroy`."""
    proxy = create_proxy(fn)
    _live_proxies[id(proxy)] = proxy
    return proxy


def destroy(proxy: Any) -> None:
    """Destroy a proxy made by :func:`create`. Destroying it twice does nothing."""
    if _live_proxies.pop(id(proxy), None) is not None:
        proxy.destroy()


def listen(target: Any, event: str, fn: Callable[[Any], Any]) -> Callable[[], None]:
    """``target.addEventListener(event, proxy)``; returns the function that removes it.

    Calling the returned function more than once does nothing.
    """
    global _live_listeners
    proxy = create(fn)
    target.addEventListener(event, proxy)
    _live_listeners += 1
    removed = False

    def unlisten() -> None:
        global _live_listeners
        nonlocal removed
        if removed:
            return
        removed = True
        target.removeEventListener(event, proxy)
        _live_listeners -= 1
        destroy(proxy)

    return unlisten


def trace_pyodide_proxies() -> None:
    """Start Pyodide's own PyProxy allocation tracing (from an empty map)."""
    global _tracing
    module = _pyodide_module()
    module.pyproxy_alloc_map.clear()
    module.enable_pyproxy_allocation_tracing()
    _tracing = True


def counts() -> dict[str, int | None]:
    """Live ``proxies`` and ``listeners`` made by pyjobq here, and ``pyodide_proxies``:
    every PyProxy Pyodide made since :func:`trace_pyodide_proxies` and has not destroyed
    (None while not tracing)."""
    return {
        "proxies": len(_live_proxies),
        "listeners": _live_listeners,
        "pyodide_proxies": int(_pyodide_module().pyproxy_alloc_map.size) if _tracing else None,
    }


def _pyodide_module() -> Any:
    import pyodide_js  # type: ignore[import-not-found]

    return pyodide_js._module


async def worker_counts(side: ExecutorSide, *, trace: bool = False) -> dict[str, int | None]:
    """:func:`counts` in ``side``'s scheduler worker (a ``debug_counts`` request).

    ``trace=True`` first starts Pyodide's proxy tracing there (see :func:`trace_pyodide_proxies`).
    """
    counts: dict[str, int | None] = await side.persistent.request(make("debug_counts", trace=trace),
                                                                  to_worker=True)
    return counts
