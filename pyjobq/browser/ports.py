"""Web Locks, BroadcastChannel and worker messaging behind pyjobq's ports.

Messages travel as JSON text: ``postMessage`` of a Python dict raises
``DataCloneError``, and JSON keeps them JSON-like by construction. Anything
received that is not JSON text of an object is handed on as None, which
:func:`pyjobq.core.messages.parse` rejects (logged, ignored).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
from typing import Any, Awaitable, Callable

import js  # type: ignore[import-not-found]
from pyodide.ffi import JsException, to_js

from ..core.errors import LockStolen
from ..core.messages import job_update_prefix
from ..core.ports import LockManagerBase, Message, Release, Unsubscribe
from ..loop import TaskSet, new_future, take_by_request
from . import batching, proxies
from .js_helpers import Helper

log = logging.getLogger("pyjobq")


def js_object(value: dict[str, Any]) -> Any:
    return to_js(value, dict_converter=js.Object.fromEntries, create_pyproxies=False)


def decode(data: Any) -> Any:
    if not isinstance(data, str):
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


class _Listeners:
    """One JS ``message`` listener on a target, fanned out to Python subscribers."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._subscribers: list[Callable[[Message], None]] = []
        self._unlisten: Callable[[], None] | None = None
        #: JSON texts starting with one of these are dropped unread (this page's own echoes).
        self.ignored: tuple[str, ...] = ()

    def subscribe(self, callback: Callable[[Message], None]) -> Unsubscribe:
        if self._unlisten is None:
            self._unlisten = proxies.listen(self._target, "message", self._on_message)
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)
            if not self._subscribers:
                self.close()

        return unsubscribe

    def deliver(self, data: Any) -> None:
        message = decode(data)
        for callback in list(self._subscribers):
            try:
                callback(message)
            except Exception:
                log.exception("pyjobq: a message handler raised")

    def _on_message(self, event: Any) -> None:
        data = event.data
        if self.ignored and isinstance(data, str) and data.startswith(self.ignored):
            return
        with batching.event():  # in the scheduler worker: handled in the event that delivered it
            self.deliver(data)

    def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None

    def retarget(self, target: Any) -> None:
        """Listen to ``target`` instead, for the same subscribers."""
        self.close()
        self._target = target
        if self._subscribers:
            self._unlisten = proxies.listen(target, "message", self._on_message)


class BroadcastChannelPort:
    """The configured BroadcastChannel: reaches every other context of the origin."""

    def __init__(self, name: str) -> None:
        self._channel = js.BroadcastChannel.new(name)
        self._listeners = _Listeners(self._channel)
        self.closed = False

    def post(self, message: Message) -> None:
        # Posting on a closed channel throws InvalidStateError; callers decide what that means.
        self._channel.postMessage(json.dumps(message))

    def subscribe(self, callback: Callable[[Message], None]) -> Unsubscribe:
        return self._listeners.subscribe(callback)

    def ignore_source(self, source: str) -> None:
        self._listeners.ignored += (job_update_prefix(source),)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._listeners.close()
            self._channel.close()


class PortLink:
    """A worker (seen from its page) or the worker's own global scope (seen from inside)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._listeners = _Listeners(target)

    def send(self, message: Message) -> None:
        self._target.postMessage(json.dumps(message))

    def subscribe(self, callback: Callable[[Message], None]) -> Unsubscribe:
        return self._listeners.subscribe(callback)

    def retarget(self, target: Any) -> None:
        """Talk to ``target`` from now on (a new worker in place of one that was ended): the
        subscribers stay, and nothing more is heard from the old one."""
        self._target = target
        self._listeners.retarget(target)

    def deliver(self, data: Any) -> None:
        """Hand on a message that arrived before Python was listening
        (the bootstrap buffered it)."""
        self._listeners.deliver(data)


def web_grab(name: str, on_granted: Callable[[Callable[[], None]], None], *, steal: bool = False,
             on_stolen: Callable[[], None] | None = None) -> Callable[[], None]:
    """:class:`pyjobq.engine.lease.Grab` on ``navigator.locks``. The lock is held by a JS promise
    whose ``resolve`` we keep, so ``release()`` is synchronous: called in a ``freeze`` handler it
    lets go before the page stops (a release through an asyncio callback would run in a later
    macrotask, after the freeze). A queued request is dropped with an ``AbortSignal``. A held lock
    taken by a ``steal`` rejects its request with an ``AbortError``, as a dropped queued request
    does: which it was is told by whether it had been granted."""
    controller = js.AbortController.new()
    state: dict[str, Any] = {"resolve": None, "settled": False, "granted": False}

    def release() -> None:
        resolve, state["resolve"] = state["resolve"], None
        if resolve is not None:
            resolve()

    def executor(resolve: Any, _reject: Any) -> None:
        state["resolve"] = resolve

    def granted(_lock: Any) -> Any:
        state["granted"] = True
        make_promise = proxies.create(executor)
        try:
            promise = js.Promise.new(make_promise)
        finally:
            proxies.destroy(make_promise)
        on_granted(release)
        return promise

    callback = proxies.create(granted)

    async def wait(request: Any) -> None:
        try:
            await request
        except JsException as exc:
            if "AbortError" not in str(exc):
                log.warning("pyjobq: the processor lease request failed: %s", exc)
            elif state["granted"] and state["resolve"] is not None and on_stolen is not None:
                state["resolve"] = None  # held, not let go by us: taken with steal
                on_stolen()
        finally:
            state["settled"] = True
            proxies.destroy(callback)

    # A steal cannot be queued, so it takes no signal (the Web Locks API refuses both at once).
    options = js_object({"mode": "exclusive", "steal": True} if steal else
                        {"mode": "exclusive", "signal": controller.signal})
    asyncio.ensure_future(wait(js.navigator.locks.request(name, options, callback)))

    def cancel() -> None:
        if not state["settled"]:
            controller.abort()

    return cancel


class HeldLock:
    """What a :meth:`WebLocks.request` callback gets for a granted lock (a ``Lock``'s name and
    mode); None when ``if_available`` found it taken."""

    __slots__ = ("name", "mode")

    def __init__(self, name: str, mode: str) -> None:
        self.name = name
        self.mode = mode

    def __repr__(self) -> str:
        return f"<HeldLock {self.name!r} {self.mode}>"


class _Ask:
    """One request made through ``locks.js``: the holder's coroutine function, its outcome, and
    the request's end (None, or the error's name and message)."""

    __slots__ = ("name", "mode", "callback", "outcome", "ended")

    def __init__(self, name: str, mode: str, callback: Callable[[Any], Awaitable[Any]]) -> None:
        self.name = name
        self.mode = mode
        self.callback = callback
        self.outcome: asyncio.Future[Any] = new_future()
        self.ended: asyncio.Future[tuple[str, str] | None] = new_future()


#: ``locks.js``: where it cannot be evaluated, :class:`WebLocks` asks from Python.
LOCKS_JS = Helper("locks.js", "Web Locks are asked from Python")
#: Every request's token, unique in this context: ``locks.js`` keeps one table of held locks
#: for every WebLocks of the context (a page has several), so tokens must never repeat.
_lock_tokens = itertools.count()


class WebLocks(LockManagerBase):
    """``navigator.locks``: hold a lock while a Python coroutine runs.

    Each request is one call into ``locks.js``, which calls back one proxy this object makes as
    it is made and keeps for its life (the run locks ask one or two a job). Where ``locks.js``
    cannot be evaluated, each request is made from Python with proxies of its own.
    """

    def __init__(self) -> None:
        self._helper = LOCKS_JS.get()
        self._asks: dict[int, _Ask] = {}
        #: :meth:`take_if_available`'s requests by token: each answer, until the request ends.
        self._takes: dict[int, asyncio.Future[Release | None]] = {}
        self._callback = proxies.create(self._called_back) if self._helper is not None else None
        self._requests = TaskSet(log, "pyjobq: a Web Locks request failed")

    def take_if_available(self, name: str) -> asyncio.Future[Release | None]:
        """One ``ifAvailable`` call into ``locks.js``, answered in the lock manager's event; no
        coroutine or callback proxy of its own (where ``locks.js`` cannot be evaluated, a
        :meth:`request` held until the release)."""
        if self._helper is None:
            return take_by_request(self, name, spawn=self._requests.spawn)
        token = next(_lock_tokens)
        answer = self._takes[token] = new_future()
        try:
            self._helper.request(name, "exclusive", True, False, token, self._callback)
        except Exception as exc:  # never raised where an ask is expected: its answer says it
            del self._takes[token]
            answer.set_exception(RuntimeError(f"navigator.locks.request({name!r}) failed: {exc}"))
        return answer

    async def _request(self, name: str, callback: Callable[[Any], Awaitable[Any]], mode: str,
                       if_available: bool, steal: bool) -> Any:
        if self._helper is None:
            return await self._request_from_python(name, callback, mode=mode,
                                                   if_available=if_available, steal=steal)
        token = next(_lock_tokens)
        ask = self._asks[token] = _Ask(name, mode, callback)
        try:
            self._helper.request(name, mode, if_available, steal, token, self._callback)
            error = await ask.ended
        finally:
            self._asks.pop(token, None)
        if error is not None:
            if error[0] == "AbortError":
                raise LockStolen(f"lock {name!r} was stolen")
            raise RuntimeError(f"navigator.locks.request({name!r}) failed: {error[0]}: {error[1]}")
        return await ask.outcome

    def _called_back(self, token: int, what: str, error_name: Any = None,
                     error_message: Any = None) -> None:
        """``locks.js`` calls this in the lock manager's events (it must never throw there)."""
        ask = self._asks.get(token)
        if ask is None:
            take = self._takes.get(token)
            if take is not None:
                self._answer_take(token, take, what, error_name, error_message)
            elif what == "granted":  # its asker gave up (a cancelled request): let it go at once
                self._helper.release(token)
            return
        with batching.event():  # in the scheduler worker: what it makes ready runs in this event
            try:
                if what in ("granted", "unavailable"):
                    self._hold(token, ask,
                               HeldLock(ask.name, ask.mode) if what == "granted" else None)
                elif not ask.ended.done():
                    ask.ended.set_result(None if what == "ended" else
                                         (str(error_name), str(error_message)))
            except Exception as exc:  # never a request whose end is lost, nor a lock kept
                self._helper.release(token)
                if not ask.ended.done():
                    ask.ended.set_result(("Error", f"pyjobq could not follow the lock: {exc}"))

    def _answer_take(self, token: int, answer: asyncio.Future[Release | None], what: str,
                     error_name: Any, error_message: Any) -> None:
        """A :meth:`take_if_available` request's news from ``locks.js`` (never throws there)."""
        if what == "ended" or what == "failed":
            del self._takes[token]
        if answer.done():  # cancelled before its grant, or a later word of one answered
            if what == "granted":
                self._helper.release(token)
            elif what == "failed" and not answer.cancelled() and answer.result() is not None:
                log.warning("pyjobq: lock taken away while held: %s: %s", error_name, error_message)
            return
        with batching.event():  # in the scheduler worker: the asker goes on in this event
            if what == "granted":
                answer.set_result(functools.partial(self._helper.release, token))
            elif what == "unavailable":
                answer.set_result(None)
            elif what == "failed":
                answer.set_exception(RuntimeError(
                    f"navigator.locks.request failed: {error_name}: {error_message}"))

    def _hold(self, token: int, ask: _Ask, lock: HeldLock | None) -> None:
        task = asyncio.ensure_future(ask.callback(lock))

        def ended(t: asyncio.Future[Any]) -> None:
            if lock is not None:
                self._helper.release(token)
            if ask.outcome.done():
                return
            if t.cancelled():
                ask.outcome.cancel()
            elif t.exception() is not None:
                ask.outcome.set_exception(t.exception())  # type: ignore[arg-type]
            else:
                ask.outcome.set_result(t.result())

        task.add_done_callback(ended)

    async def _request_from_python(
        self, name: str, callback: Callable[[Any], Awaitable[Any]], *, mode: str,
        if_available: bool, steal: bool,
    ) -> Any:
        """A request with proxies of its own, where ``locks.js`` cannot be evaluated."""
        loop = asyncio.get_event_loop()
        outcome: asyncio.Future[Any] = loop.create_future()

        def granted(lock: Any) -> Any:
            # In the scheduler worker: the holder starts in the grant's event.
            with batching.event():
                return grant(lock)

        def grant(lock: Any) -> Any:
            # ifAvailable hands over null when the lock is taken (DESIGN: test `if not lock`).
            task = asyncio.ensure_future(callback(lock if lock else None))

            def executor(resolve: Any, reject: Any) -> None:
                def settle(t: asyncio.Future[Any]) -> None:
                    if not outcome.done():
                        if t.cancelled():
                            outcome.cancel()
                        elif t.exception() is not None:
                            outcome.set_exception(t.exception())  # type: ignore[arg-type]
                        else:
                            outcome.set_result(t.result())
                    resolve(None)

                task.add_done_callback(settle)

            # The lock is held until this promise settles; it carries no Python object,
            # so nothing crosses into JS that a .then could destroy.
            promise_executor = proxies.create(executor)
            try:
                promise = js.Promise.new(promise_executor)
            finally:
                proxies.destroy(promise_executor)
            return promise

        proxy = proxies.create(granted)
        options = js_object({"mode": mode, "ifAvailable": if_available, "steal": steal})
        try:
            await js.navigator.locks.request(name, options, proxy)
        except JsException as exc:
            if getattr(exc, "name", "") == "AbortError" or "AbortError" in str(exc):
                raise LockStolen(f"lock {name!r} was stolen") from None
            raise
        finally:
            proxies.destroy(proxy)
        return await outcome

    async def waiting(self) -> set[str]:
        state = await js.navigator.locks.query()
        return {str(request.name) for request in state.pending}

    async def held(self) -> dict[str, str]:
        state = await js.navigator.locks.query()
        held: dict[str, str] = {}
        for lock in state.held:
            if held.get(lock.name) != "exclusive":
                held[lock.name] = lock.mode
        return held
