"""Cross-tab tests of your pages from pytest, on Playwright for Python (its sync API).

The Python twin of ``playwright.cjs`` (docs/testing.md, "Cross-tab tests in Python"): open a
tab with its queue ready, run Python on it, read its jobs, wait for a job's status, crash or
freeze it, take its browser context offline. Nothing here mocks the browser: tabs are real
pages of one context (one origin: one IndexedDB, one lock manager, one ``BroadcastChannel``),
a crash is a renderer crash, a freeze is Chromium's own.

Every helper runs Python on the page through one runner: ``window.py(code)`` when the page
defines it, else ``window.pyodide.runPythonAsync(code)``; pass ``run=`` to
:func:`open_tab` for your own (``run(page, code) -> value``). Code runs with top-level
``await``; a result that is a string of JSON comes back decoded.

Why the sync API: it is the one pytest users write Playwright tests in (pytest-playwright's
``page`` and ``context`` fixtures are sync objects), and a sync test needs no event-loop plugin.

:class:`Site`, :func:`serve_folder` and :func:`site_at` are what the plugin's ``pyjobq_site``
fixture is made of: override that fixture with them for other headers or another server.

Every wait has a bound, kept by Playwright's driver (a timer in the page could not fire while
synchronous Python holds its main thread), and fails with :class:`TabError` naming what it
waited for; a ``timeout_s`` must be greater than 0 (:class:`ValueError`). A
helper that cannot do what it says says so instead of doing nothing: :meth:`Tab.freeze` on a
page Chromium will not freeze (any page of a browser Playwright launched itself) raises,
naming :func:`launch_chromium`, which starts a browser whose pages can be frozen.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from playwright.sync_api import BrowserContext, CDPSession, Error, Page, Playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from ..core.status import Status
from ._site import Site, serve_folder, site_at

__all__ = ["Tab", "TabError", "Runner", "open_tab", "offline", "online", "launch_chromium",
           "READY", "STATUSES", "Site", "serve_folder", "site_at"]

Runner = Callable[[Page, str], Any]
"""Runs Python ``code`` on ``page`` and returns its value: ``run(page, code)``."""

READY = "() => window.pyReady === true || typeof window.py === 'function' || !!window.pyodide"
"""The default test that Python can run on a page (a JavaScript function, run in the page)."""

# The default runner, in the page: window.py, else window.pyodide. It only starts the run (on a
# task of its own, so this call answers before the Python takes the thread) and keeps its
# outcome in window.__pyjobq[n]; _SETTLED, polled by Playwright's wait_for_function, gives it.
# The bound is the driver's, not the page's: a page timer cannot fire while synchronous Python
# holds the main thread, and page.evaluate has no timeout.
_START = """([code, n]) => {
  const w = window;
  const runs = w.__pyjobq || (w.__pyjobq = {});
  if (n in runs) return true;
  const entry = runs[n] = { settled: false };
  const settle = (fields) => { Object.assign(entry, fields, { settled: true }); };
  let run;
  if (typeof w.py === "function") {
    run = () => w.py(code);
  } else if (w.pyodide) {
    run = async () => {
      const value = await w.pyodide.runPythonAsync(code);
      if (!value || typeof value.toJs !== "function") return value;
      try {
        return value.toJs({ dict_converter: Object.fromEntries });
      } finally {
        value.destroy();
      }
    };
  } else {
    settle({ error: "pyjobq: the page defines neither window.py nor window.pyodide; expose " +
                    "one (window.pyodide = pyodide), or pass run= to open_tab" });
    return true;
  }
  setTimeout(() => {
    Promise.resolve().then(run).then(
      (value) => settle({ value: value === undefined ? null : value }),
      (e) => settle({ error: String(e && e.stack && String(e.stack).includes(String(e.message))
                                    ? e.stack : (e && e.message) || e) }));
  }, 0);
  return true;
}"""
_SETTLED = """(n) => {
  const runs = window.__pyjobq || {};
  const entry = runs[n];
  // Synchronous on purpose: wait_for_function takes a returned promise as a true value at once,
  // so an async check would hand back `false` for any run longer than its first look.
  if (!entry || !entry.settled) return false;
  delete runs[n];
  return "error" in entry ? { error: entry.error } : { value: entry.value };
}"""
_RUNS = itertools.count(1)

# Said on the console by the page's own `freeze` / `resume` handlers: the only word a frozen
# page can give (nothing can be evaluated in it until it runs again).
_FROZE = "pyjobq-testing:freeze"
_WATCH_FREEZE = f"""() => {{
  if (window.__pyjobqWatchesFreeze) return true;
  window.__pyjobqWatchesFreeze = true;
  document.addEventListener("freeze", () => console.debug({json.dumps(_FROZE)}));
  return true;
}}"""

_CANNOT_FREEZE = (
    "the tab did not freeze: Chromium fired no `freeze` event within {s} s. Pages of a browser "
    "Playwright launched itself, or of a context it created, cannot be frozen (its focus "
    "emulation keeps them visible, and Page.setWebLifecycleState is then silently ignored); "
    "open the tab in the context pyjobq.testing.playwright.launch_chromium(...) gives, which "
    "starts Chromium and connects to it so that its pages can be frozen")


# How long crash() waits for the answer Page.crash never gets.
_NO_ANSWER_MS = 500


STATUSES = tuple(str(status.value) for status in Status)
"""The statuses a job can have: what :meth:`Tab.wait_for_status` accepts."""


class TabError(AssertionError):
    """A helper could not do what it says: a wait ran out, Python failed on the page, the tab
    would not freeze. The message names what was wrong and what to do."""


def _bound(name: str, value: float) -> float:
    """``value``, a timeout in seconds; a positive number (Playwright reads 0 as "no timeout",
    which would let a wait hang for ever)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number of seconds greater than 0, not {value!r} "
                         "(0 would mean no timeout at all)")
    return float(value)


def _busy(page: Page, what: str, timeout_s: float) -> TabError:
    return TabError(
        f"{what} on {page.url} did not finish within {timeout_s} s: the page's main thread is "
        "busy (synchronous Python or JavaScript holding it, e.g. time.sleep or a loop with no "
        "await), or the code never finished. Raise timeout_s if it is only slow, or look for "
        "blocking code; a page whose thread stays busy answers nothing, so close it "
        "(tab.page.close()) rather than reuse it")


def _in_page(page: Page, function: str, arg: Any, timeout_s: float, what: str,
             polling: float | None = None, bound_s: float | None = None) -> Any:
    """Run the JavaScript ``function`` in ``page`` until it gives something true, and give
    that, bounded by the driver (``page.evaluate`` has no timeout; a busy page never answers).

    Raises:
        TabError: not within ``timeout_s``.
    """
    try:
        if polling is None:
            handle = page.wait_for_function(function, arg=arg, timeout=timeout_s * 1000)
        else:
            handle = page.wait_for_function(function, arg=arg, timeout=timeout_s * 1000,
                                            polling=polling)
    except PlaywrightTimeoutError:
        raise _busy(page, what, timeout_s if bound_s is None else bound_s) from None
    try:
        return handle.json_value()
    finally:
        handle.dispose()


def _decoded(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


class Tab:
    """One tab (a page of a browser context) running your app under test.

    Made by :func:`open_tab`. ``page`` is its Playwright page (use it for anything else),
    ``context`` its browser context."""

    def __init__(self, context: BrowserContext, page: Page, *, run: Runner | None = None,
                 timeout_s: float = 120.0) -> None:
        self.context = context
        self.page = page
        self.timeout_s = _bound("timeout_s", timeout_s)
        self._run = run
        self._cdp: CDPSession | None = None
        self._frozen = False
        self._crashed = False
        page.on("crash", self._on_crash)

    def _on_crash(self, _page: Page) -> None:
        self._crashed = True

    def __repr__(self) -> str:
        state = "frozen" if self._frozen else "crashed" if self._crashed else "open"
        return f"<Tab {self.page.url} {state}>"

    # -- Python on the page -----------------------------------------------------------------
    def py(self, code: str, *, timeout_s: float = 60.0) -> Any:
        """Run Python on the page (top-level ``await`` allowed) and return its value; a string
        of JSON comes back decoded (end the code with ``json.dumps(...)`` for dicts and lists).

        A runner of your own (``open_tab(run=...)``) bounds its own wait: ``timeout_s`` is
        the default runner's.

        Raises:
            TabError: the Python raised (its traceback is in the message), did not finish in
                ``timeout_s``, the page has no runner, or the tab is frozen.
        """
        limit = _bound("timeout_s", timeout_s)
        if self._frozen:
            raise TabError(f"{self!r} is frozen: nothing runs on it until tab.resume()")
        first = code.strip().splitlines()[0] if code.strip() else ""
        what = f"Python (code starting {first!r})"
        try:
            if self._run is not None:
                return _decoded(self._run(self.page, code))
            n = next(_RUNS)
            end = time.monotonic() + limit
            _in_page(self.page, _START, [code, n], limit, what)
            left = max(end - time.monotonic(), 0.001)
            outcome = _in_page(self.page, _SETTLED, n, left, what, polling=20, bound_s=limit)
        except Error as e:
            raise TabError(f"Python on {self.page.url} failed (code starting {first!r}):\n"
                           f"{e.message}") from None
        if "error" in outcome:
            raise TabError(f"Python on {self.page.url} failed (code starting {first!r}):\n"
                           f"{outcome['error']}")
        return _decoded(outcome.get("value"))

    run_python = py
    """Another name for :meth:`py`."""

    def wait_for_python(self, *, ready: str = READY, timeout_s: float | None = None) -> None:
        """Wait until Python can run on the page (after a navigation or a reload): until the
        JavaScript function ``ready`` is true in it.

        Raises:
            TabError: it was not within ``timeout_s`` (default: the tab's, 120 s).
        """
        limit = self.timeout_s if timeout_s is None else _bound("timeout_s", timeout_s)
        try:
            self.page.wait_for_function(ready, timeout=limit * 1000)
        except Error as e:
            raise TabError(f"Python was not ready on {self.page.url} within {limit} s (waited "
                           f"for {ready}): does the page load Pyodide and expose window.py or "
                           f"window.pyodide? ({e.message.splitlines()[0]})") from None

    def queue_ready(self, *, timeout_s: float | None = None) -> None:
        """Wait until the tab's queue answers (``pyjobq.query_all()``): IndexedDB open, the
        page's side started. A tab waiting in line for the processor lease is ready too: it
        stores and answers at once, whatever its worker does.

        Raises:
            TabError: it did not answer within ``timeout_s`` (default: the tab's, 120 s).
        """
        limit = self.timeout_s if timeout_s is None else _bound("timeout_s", timeout_s)
        seconds = max(1, round(limit))
        try:
            self.py(f"import asyncio, pyjobq\nawait asyncio.wait_for(pyjobq.query_all(), "
                    f"{seconds})\n'ok'", timeout_s=seconds + 5)
        except TabError as e:
            raise TabError(
                f"the queue on {self.page.url} did not answer pyjobq.query_all() within "
                f"{seconds} s. Check that the page installs and imports pyjobq, that its "
                "IndexedDB can open (not a private window refusing storage, not blocked by "
                "another tab's upgrade), that setup= configured it without error, and the "
                f"page's console errors; raise timeout_s for a slow boot. ({e})") from None

    # -- jobs ------------------------------------------------------------------------------
    def jobs(self) -> list[dict[str, Any]]:
        """Every job this tab lists (``pyjobq.query_all()``): the origin's stored records,
        read from its IndexedDB with their ``_params``, then this tab's volatile jobs."""
        rows = self.py("import json, pyjobq\njson.dumps(await pyjobq.query_all())")
        if not isinstance(rows, list):
            raise TabError(f"pyjobq.query_all() on {self.page.url} gave {rows!r}, not a list")
        return rows

    def job(self, job_id: str) -> dict[str, Any] | None:
        """The job ``job_id`` as this tab lists it, or ``None``."""
        return next((row for row in self.jobs() if row.get("id") == job_id), None)

    def wait_for_status(self, job_id: str, statuses: str | Iterable[str], *,
                        timeout_s: float = 60.0, interval_s: float = 0.1) -> dict[str, Any]:
        """Wait until the job ``job_id`` has one of ``statuses`` (one status or several) in
        this tab's list; returns its row. Polls every ``interval_s``.

        Raises:
            TabError: it did not within ``timeout_s``; the message names the last status seen.
        """
        wanted = [statuses] if isinstance(statuses, str) else list(statuses)
        unknown = [status for status in wanted if status not in STATUSES]
        if not wanted or unknown:
            said = f"unknown status {', '.join(map(repr, unknown))}" if unknown else "no status"
            raise ValueError(f"wait_for_status: {said}; give one or more of "
                             f"{', '.join(map(repr, STATUSES))}")
        _bound("timeout_s", timeout_s)
        _bound("interval_s", interval_s)
        end = time.monotonic() + timeout_s
        while True:
            row = self.job(job_id)
            if row is not None and row.get("status") in wanted:
                return row
            if time.monotonic() > end:
                last = row.get("status") if row is not None else "not listed"
                raise TabError(f"job {job_id} did not reach {' or '.join(wanted)} in "
                               f"{timeout_s} s on {self.page.url} (last: {last})")
            # Playwright's own wait, so route handlers and events are served meanwhile.
            self.page.wait_for_timeout(interval_s * 1000)

    # -- the tab's life --------------------------------------------------------------------
    def crash(self, *, timeout_s: float = 10.0) -> None:
        """Crash the tab's renderer (CDP ``Page.crash``, as an out-of-memory kill would): no
        ``pagehide``, no ``unload``, its workers die with it and its Web Locks are released.
        Returns once it crashed.

        Raises:
            TabError: the page did not crash within ``timeout_s``, or it runs in another
                engine than Chromium (a crash needs Chromium's DevTools protocol).
        """
        _bound("timeout_s", timeout_s)
        _needs_chromium(self.context, "crash()")
        cdp = self.context.new_cdp_session(self.page)
        try:
            with self.page.expect_event("crash", timeout=timeout_s * 1000):
                try:
                    # Chromium never answers: the renderer is gone. The short bound only ends
                    # the wait for that answer; the crash itself is awaited just above.
                    cdp.send("Page.crash", timeout=_NO_ANSWER_MS)
                except Error:
                    pass
        except Error as e:
            raise TabError(f"{self!r} did not crash within {timeout_s} s: "
                           f"{e.message.splitlines()[0]}") from None

    def freeze(self, *, timeout_s: float = 10.0) -> None:
        """Freeze the tab as Chromium freezes a background tab (CDP
        ``Page.setWebLifecycleState``): ``freeze`` fires, then no task of the page or its
        workers runs. It keeps its Web Locks. :meth:`resume` lets it run again.

        Needs a tab of the context :func:`launch_chromium` gives (see :class:`TabError`'s
        message).

        Raises:
            TabError: Chromium fired no ``freeze`` within ``timeout_s`` (the tab is left
                running), the tab is frozen already, or it runs in another engine.
        """
        _bound("timeout_s", timeout_s)
        _needs_chromium(self.context, "freeze() and resume()")
        if self._frozen:
            raise TabError(f"{self!r} is frozen already")
        _in_page(self.page, _WATCH_FREEZE, None, timeout_s, "watching for `freeze`")
        cdp = self._session()
        ms = timeout_s * 1000
        try:
            with self.page.expect_console_message(lambda m: m.text == _FROZE, timeout=ms):
                cdp.send("Page.setWebLifecycleState", {"state": "frozen"}, timeout=ms)
        except Error:
            cdp.send("Page.setWebLifecycleState", {"state": "active"}, timeout=ms)
            raise TabError(_CANNOT_FREEZE.format(s=timeout_s)) from None
        self._frozen = True

    def resume(self, *, timeout_s: float = 10.0) -> None:
        """Let a frozen tab run again (``resume`` fires in it).

        Raises:
            TabError: Chromium did not answer within ``timeout_s``.
        """
        _bound("timeout_s", timeout_s)
        try:
            self._session().send("Page.setWebLifecycleState", {"state": "active"},
                                 timeout=timeout_s * 1000)
        except PlaywrightTimeoutError:
            raise TabError(f"{self!r}: Chromium did not answer the resume within "
                           f"{timeout_s} s") from None
        self._frozen = False

    @property
    def frozen(self) -> bool:
        """Whether :meth:`freeze` froze the tab and it has not been resumed since."""
        return self._frozen

    def _session(self) -> CDPSession:
        if self._cdp is None:
            _needs_chromium(self.context, "freeze() and resume()")
            self._cdp = self.context.new_cdp_session(self.page)
        return self._cdp


def _needs_chromium(context: BrowserContext, what: str) -> None:
    """Raise :class:`TabError` naming the engine when ``context`` is not Chromium's: ``what``
    speaks Chromium's DevTools protocol."""
    browser = context.browser
    engine = browser.browser_type.name if browser is not None else "chromium"
    if engine != "chromium":
        raise TabError(
            f"{what} need Chromium's DevTools protocol, and this tab runs in {engine}: run this "
            "test in a Chromium project only, or close the tab (tab.page.close()) — the nearest "
            f"thing {engine} offers to a crash (docs/testing.md, \"Firefox and WebKit\")")


def open_tab(context: BrowserContext, url: str, *, setup: str | None = None,
             before: Callable[[Page], None] | None = None, ready: str = READY,
             run: Runner | None = None, timeout_s: float = 120.0,
             log_errors: bool = True) -> Tab:
    """Open a tab of ``url`` in ``context`` and wait until its queue is ready.

    Args:
        setup: Python run first, once Python runs on the page (configure the queue as your
            app does, define reconstructors).
        before: called with the page before it navigates (routes, init scripts).
        ready: a JavaScript function, true in the page once Python can run on it (default
            :data:`READY`: ``window.pyReady``, ``window.py`` or ``window.pyodide``).
        run: the Python runner (see the module's docstring).
        timeout_s: the bound of each wait (default 120 s: a tab boots two Pyodides, its
            page's and its scheduler worker's).
        log_errors: print the page's console errors and uncaught exceptions.

    Raises:
        TabError: Python or the queue was not ready in time, or ``setup`` failed; the page
            is closed.
        ValueError: ``timeout_s`` is not greater than 0.
    """
    _bound("timeout_s", timeout_s)
    page = context.new_page()
    try:
        if log_errors:
            def show(message: Any) -> None:
                if message.type == "error" and \
                        not message.text.startswith("Failed to load resource"):
                    print(f"[page error] {message.text}")
            page.on("console", show)
            page.on("pageerror", lambda error: print(f"[page error] {error}"))
        if before is not None:
            before(page)
        page.goto(url, timeout=timeout_s * 1000)
        tab = Tab(context, page, run=run, timeout_s=timeout_s)
        tab.wait_for_python(ready=ready)
        if setup:
            tab.py(setup, timeout_s=timeout_s)
        tab.queue_ready()
    except BaseException:
        # No tab to give: close its page, so a failed open leaves no page running (a busy one
        # would slow every other tab of the browser) for the test's context to hold.
        try:
            page.close(run_before_unload=False)
        except Error:
            pass
        raise
    return tab


def offline(context: BrowserContext) -> None:
    """Take every tab of ``context`` offline: requests fail as without a network, and
    ``navigator.onLine`` is false (Playwright's ``set_offline``). Tabs get ``offline``."""
    context.set_offline(True)


def online(context: BrowserContext) -> None:
    """Bring every tab of ``context`` back online; tabs get ``online`` (pyjobq runs the jobs
    that were waiting out the disconnection)."""
    context.set_offline(False)


@contextmanager
def launch_chromium(playwright: Playwright, *, executable_path: str | None = None,
                    args: Iterable[str] = (), headless: bool = True,
                    timeout_s: float = 30.0) -> Iterator[BrowserContext]:
    """Start Chromium with a fresh profile and connect to it over CDP, for the ``with``
    block; gives its own browser context, whose pages :meth:`Tab.freeze` can freeze.

    Playwright keeps the pages of a browser it launches, and of a context it creates, visible
    (focus emulation), and Chromium does not freeze a visible page; the default context of a
    browser it connects to with ``no_defaults`` has no such setting. Everything else works as
    in any context (``context.browser`` is the browser). Each ``with`` block is a new profile:
    an empty origin.

    Args:
        executable_path: the Chromium to run (default: Playwright's own,
            ``playwright.chromium.executable_path``), e.g. a system Chromium.
        args: more command-line flags.

    Raises:
        TabError: Chromium did not start, or gave no DevTools address within ``timeout_s``.
    """
    _bound("timeout_s", timeout_s)
    chromium = _Chromium(executable_path or playwright.chromium.executable_path)
    browser = None
    try:
        endpoint = chromium.start(args, headless, timeout_s)
        browser = playwright.chromium.connect_over_cdp(endpoint, no_defaults=True,
                                                       timeout=timeout_s * 1000)
        yield browser.contexts[0]
    finally:
        if browser is not None:
            try:
                browser.close()
            except Error:
                pass  # already gone with its process
        chromium.stop()


class _Chromium:
    """A Chromium process with a DevTools port, and its temporary profile."""

    def __init__(self, exe: str) -> None:
        self.exe = exe
        self.profile = tempfile.mkdtemp(prefix="pyjobq-chromium-")
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None

    def start(self, args: Iterable[str], headless: bool, timeout_s: float) -> str:
        """Start it; its DevTools websocket address."""
        command = [self.exe, "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
                   "--no-first-run", "--no-default-browser-check",
                   # As Playwright launches it (its chromiumSandbox option is off by default).
                   "--no-sandbox", *(["--headless"] if headless else []), *args, "about:blank"]
        try:
            proc = self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True, errors="replace")
        except OSError as e:
            raise TabError(f"could not start Chromium at {self.exe}: {e}; pass "
                           "executable_path= the path of a Chromium") from None
        found = threading.Event()
        seen: list[str] = []
        endpoint: list[str] = []

        def drain() -> None:
            # Read stderr to its end: a full pipe would stall Chromium.
            assert proc.stderr is not None
            for line in proc.stderr:
                if not found.is_set():
                    seen.append(line)
                    if line.startswith("DevTools listening on "):
                        endpoint.append(line.split(" on ", 1)[1].strip())
                        found.set()
            found.set()

        self.reader = threading.Thread(target=drain, name="pyjobq-chromium", daemon=True)
        self.reader.start()
        found.wait(timeout_s)
        if not endpoint:
            said = "".join(seen[-20:]).strip() or "(nothing)"
            state = f"exited with {proc.poll()}" if proc.poll() is not None else "still silent"
            raise TabError(f"Chromium at {self.exe} gave no DevTools address within "
                           f"{timeout_s} s ({state}); it said:\n{said}")
        return endpoint[0]

    def stop(self) -> None:
        """Stop it and remove its profile."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.reader is not None:
            self.reader.join(timeout=5)
        # Chromium's helper processes may still write the profile for a moment.
        for _ in range(10):
            shutil.rmtree(self.profile, ignore_errors=True)
            if not os.path.exists(self.profile):
                break
            time.sleep(0.2)
