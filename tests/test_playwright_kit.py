"""pyjobq.testing.playwright (the Python kit) against real pages in Chromium: each helper does
what docs/testing.md's table says, the behaviours tests/e2e/testing_kit.spec.js checks for
playwright.cjs. The crash mid-run is docs/testing.md's own example
(tests/test_docs_testing_playwright.py runs it, tests/e2e/testing_docs.spec.js its twin).

Two pages are loaded the way users load them: Pyodide imported from the CDN (another origin,
a stock lock without pyjobq) with pyjobq installed by micropip from PyPI, and a PyScript page
(PyScript and its default Pyodide from the CDN, pyjobq from its ``packages``); the CDN and PyPI
are answered offline from build/cdn, as tests/e2e/registries.js does for the JavaScript suites.

The site is "a server of your own" to the plugin: tests/server.py (build/site and its fake API)
on a free port, as the Playwright config's webServer is for the JavaScript suite. The app's API
is answered by Playwright routes, except where a request must cross the (emulated) network: a
routed answer never does, so an offline try goes to the server's /api/echo.
"""

from __future__ import annotations

import json
import mimetypes
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    Route,
    sync_playwright,
)

from pyjobq.testing._site import Site, site_at
from pyjobq.testing.playwright import (
    Tab,
    TabError,
    launch_chromium,
    offline,
    online,
    open_tab,
)
from server import make_server

ROOT = Path(__file__).resolve().parent.parent
# Debian's chromium, with the flags that keep it quiet offline (as tests/conftest.py launches it).
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = json.loads((ROOT / "tests" / "chromium-flags.json").read_text())
CDN = ROOT / "build" / "cdn"
PYSCRIPT = ROOT / "node_modules" / "@pyscript" / "core"
PYODIDE_VERSION = "314.0.7"
PYSCRIPT_VERSION = "0.7.31"

# The README's cdn.html, plus the one line a page adds so the kit can run Python on it.
CDN_PAGE = f"""<!doctype html>
<meta charset="utf-8">
<script type="module">
  import {{ loadPyodide }} from "https://cdn.jsdelivr.net/pyodide/v{PYODIDE_VERSION}/full/pyodide.mjs";
  const pyodide = await loadPyodide();
  await pyodide.loadPackage("micropip");
  await pyodide.pyimport("micropip").install("pyjobq");
  window.pyodide = pyodide;  // what the kit runs Python through
</script>
"""

# The README's pyscript.html, its Python exposing Pyodide to the kit (docs/testing.md).
PYSCRIPT_PAGE = f"""<!doctype html>
<meta charset="utf-8">
<script type="module" src="https://cdn.jsdelivr.net/npm/@pyscript/core@{PYSCRIPT_VERSION}/dist/core.js"></script>
<script type="py" config='{{"packages": ["pyjobq"]}}'>
import js, pyodide_js
js.window.pyodide = pyodide_js
</script>
"""

SETUP = """
import json, pyjobq
from pyodide.http import pyfetch

async def send(method, path, body):
    return await pyfetch(path, method=method, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})

pyjobq.configure(transport=send)
"""


@pytest.fixture(scope="module")
def pyjobq_site() -> Iterator[Site]:
    """The plugin's fixture, given a server of our own: tests/server.py on a free port."""
    server = make_server(0, ROOT / "build" / "site")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site_at(f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()
    server.server_close()


def save(path: str, body: dict[str, Any]) -> str:
    """Python that files a persistent POST of ``body`` to ``path`` and gives its id."""
    return (f"job = pyjobq.enqueue_fetch('POST', {path!r}, {body!r})\n"
            "await job.stored\njson.dumps(job.id)")


def evaluate(page: Page, function: str, arg: Any = None, timeout_s: float = 30.0) -> Any:
    """``page.evaluate``, bounded: Playwright's evaluate has no timeout (a page whose main
    thread is busy would hang the suite); its wait_for_function has one, the driver's."""
    handle = page.wait_for_function(f"async (arg) => ({{ value: await ({function})(arg) }})",
                                    arg=arg, timeout=timeout_s * 1000)
    try:
        return handle.json_value().get("value")
    finally:
        handle.dispose()


def stored_record(tab: Tab, job_id: str) -> Any:
    """The job's record straight from the origin's IndexedDB (no pyjobq call), or None."""
    return evaluate(tab.page, """async (id) => {
      const db = await new Promise((ok, no) => {
        const r = indexedDB.open("ui-jobs");
        r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error);
      });
      try {
        return await new Promise((ok, no) => {
          const q = db.transaction("jobs").objectStore("jobs").get(id);
          q.onsuccess = () => ok(q.result ?? null); q.onerror = () => no(q.error);
        });
      } finally { db.close(); }
    }""", job_id)


def poll(what: str, check: Any, tab: Tab, timeout_s: float = 60.0) -> Any:
    """Call ``check()`` until it gives something true; fail naming ``what`` after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < end, f"{what}: not within {timeout_s} s"
        tab.page.wait_for_timeout(100)


def api(sent: list[Any]) -> Any:
    """The app's API, as the browser sees it: every request recorded, answered 201."""
    def answer(route: Route) -> None:
        sent.append(route.request.post_data_json)
        route.fulfill(status=201, json={"saved": True})
    return answer


def registries(context: BrowserContext, site: Site) -> list[str]:
    """Answer the CDN's Pyodide and PyPI from build/cdn for every page and worker of
    ``context``; abort anything else outside ``site``. Returns what was served."""
    if not (CDN / "pypi" / "simple" / "pyjobq" / "index.json").is_file():
        pytest.fail("build/cdn is missing: run `make build`")
    served: list[str] = []
    cors = {"access-control-allow-origin": "*", "cross-origin-resource-policy": "cross-origin"}

    def file(route: Route, path: Path, ctype: str | None = None) -> None:
        if not path.is_file() or not any(path.resolve().is_relative_to(root.resolve())
                                         for root in (CDN, PYSCRIPT)):
            route.fulfill(status=404, headers=cors, body="not found")
            return
        kind = ctype or {".mjs": "text/javascript", ".wasm": "application/wasm",
                         ".json": "application/json"}.get(path.suffix) \
            or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        served.append(route.request.url)
        route.fulfill(status=200, headers=cors, content_type=kind, path=path)

    def answer(route: Route) -> None:
        url = route.request.url
        if m := re.match(r"https://cdn\.jsdelivr\.net/pyodide/(v[^/]+/full/.+)$", url):
            return file(route, CDN / "pyodide" / m.group(1))
        if m := re.match(r"https://cdn\.jsdelivr\.net/npm/@pyscript/core@([^/]+)/dist/(.+)$",
                         url):
            root = PYSCRIPT / "dist" if m.group(1) == PYSCRIPT_VERSION else PYSCRIPT / "missing"
            return file(route, root / m.group(2))
        if m := re.match(r"https://pypi\.org/simple/([^/]+)/?$", url):
            return file(route, CDN / "pypi" / "simple" / m.group(1) / "index.json",
                        "application/vnd.pypi.simple.v1+json")
        if m := re.match(r"https://files\.pythonhosted\.org/packages/pyjobq/([^/]+)$", url):
            return file(route, CDN / "pypi" / "files" / m.group(1))
        route.abort("internetdisconnected")

    context.route(lambda url: not url.startswith((site.base, "blob:", "data:")), answer)
    return served


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context()
    yield context
    context.close()


def test_a_cdn_page_runs_python_lists_its_records_and_waits_out_an_offline_spell(
        context: BrowserContext, pyjobq_site: Site) -> None:
    served = registries(context, pyjobq_site)
    sent: list[Any] = []
    context.route("**/api/notes/**", api(sent))
    context.route(pyjobq_site.url("kit/cdn.html"),
                  lambda route: route.fulfill(content_type="text/html", body=CDN_PAGE))
    tab = open_tab(context, pyjobq_site.url("kit/cdn.html"), setup=SETUP)
    assert f"https://cdn.jsdelivr.net/pyodide/v{PYODIDE_VERSION}/full/pyodide.asm.wasm" in served
    assert any(url.startswith("https://files.pythonhosted.org/packages/pyjobq/")
               for url in served)

    # py / run_python: top-level await, a JSON string decoded, a Python error named.
    assert tab.py("import asyncio\nawait asyncio.sleep(0)\njson.dumps({'n': [1, 2]})") == \
        {"n": [1, 2]}
    assert tab.run_python("'plain text'") == "plain text"
    # A run longer than one look of the bounded wait gives its own value, not the look's "not yet".
    assert tab.py("import asyncio\nawait asyncio.sleep(2.5)\n'much later'") == "much later"
    with pytest.raises(TabError, match="ZeroDivisionError"):
        tab.py("1 / 0")
    # What docs/testing.md tells a page without a JavaScript line of its own to expose.
    assert tab.py("import pyodide_js\njson.dumps(callable(pyodide_js.runPythonAsync))") is True

    # jobs / job / wait_for_status: the records, as stored in the origin's IndexedDB.
    first = tab.py(save("/api/notes/first", {"text": "hello"}))
    row = tab.wait_for_status(first, "done")
    assert row["_params"] == {"method": "POST", "path": "/api/notes/first",
                              "body": {"text": "hello"}}
    assert row["http_status"] == 201 and sent == [{"text": "hello"}]
    assert stored_record(tab, first) == row
    assert [job["id"] for job in tab.jobs()] == [first]
    assert tab.job("no-such-job") is None
    with pytest.raises(TabError, match=r"no-such-job did not reach done .*\(last: not listed\)"):
        tab.wait_for_status("no-such-job", ["done"], timeout_s=0.3)

    # offline / online: a try while offline costs no attempt; back online, the job is done.
    offline(context)
    assert evaluate(tab.page, "() => navigator.onLine") is False
    path = f"/api/echo/kit-offline-{uuid.uuid4().hex}"
    second = tab.py(save(path, {"text": "offline"}))
    waiting = poll("an offline try", lambda: (rec := tab.job(second)) and
                   rec["code"] == "offline" and rec, tab)
    assert (waiting["status"], waiting["attempts"]) == ("pending", 0)
    online(context)
    done = tab.wait_for_status(second, "done")
    assert (done["http_status"], done["attempts"]) == (200, 1)
    assert done["result"]["path"] == path and done["result"]["body"] == {"text": "offline"}


def test_freeze_refuses_a_page_it_cannot_freeze_and_leaves_it_running(
        context: BrowserContext, pyjobq_site: Site) -> None:
    page = context.new_page()
    page.goto(pyjobq_site.url("tests/blank.html"))
    tab = Tab(context, page)
    with pytest.raises(TabError, match="did not freeze.*launch_chromium"):
        tab.freeze(timeout_s=2)
    assert not tab.frozen
    assert evaluate(page, "() => new Promise((ok) => setTimeout(() => ok('running'), 10))") == \
        "running"


def test_a_frozen_tab_hands_over_and_runs_again_on_resume(
        playwright: Playwright, pyjobq_site: Site) -> None:
    with launch_chromium(playwright, executable_path=CHROMIUM, args=CHROMIUM_ARGS) as context:
        sent: list[Any] = []
        context.route("**/api/notes/**", api(sent))
        first = open_tab(context, pyjobq_site.url("tests/harness.html"), setup=SETUP)
        second = open_tab(context, pyjobq_site.url("tests/harness.html"), setup=SETUP)
        before = first.py(save("/api/notes/before", {"n": 1}))
        first.wait_for_status(before, "done")

        first.freeze()
        assert first.frozen
        with pytest.raises(TabError, match="is frozen"):
            first.py("1")
        # The frozen tab let its lease go: the other one takes over and runs a new job.
        during = second.py(save("/api/notes/during", {"n": 2}))
        assert second.wait_for_status(during, "done")["http_status"] == 201

        first.resume()
        assert not first.frozen
        assert first.py("json.dumps(1 + 1)") == 2
        assert first.wait_for_status(during, "done")["id"] == during
        assert sent == [{"n": 1}, {"n": 2}]


def test_a_pyscript_page_runs_a_job_the_kit_reads(context: BrowserContext,
                                                  pyjobq_site: Site) -> None:
    served = registries(context, pyjobq_site)
    sent: list[Any] = []
    context.route("**/api/notes/**", api(sent))
    context.route(pyjobq_site.url("kit/pyscript.html"),
                  lambda route: route.fulfill(content_type="text/html", body=PYSCRIPT_PAGE))
    tab = open_tab(context, pyjobq_site.url("kit/pyscript.html"), setup=SETUP)
    assert any(url.startswith("https://cdn.jsdelivr.net/pyodide/") for url in served)
    job_id = tab.py(save("/api/notes/pyscript", {"host": "pyscript"}))
    assert tab.wait_for_status(job_id, "done")["http_status"] == 201
    assert [job["id"] for job in tab.jobs()] == [job_id] and sent == [{"host": "pyscript"}]


def test_launch_chromium_names_a_chromium_it_cannot_start(playwright: Playwright,
                                                          tmp_path: Path) -> None:
    missing = tmp_path / "no-chromium"
    with pytest.raises(TabError, match=f"could not start Chromium at {missing}.*executable_path="):
        with launch_chromium(playwright, executable_path=str(missing)):
            pass
    silent = tmp_path / "silent-chromium"
    silent.write_text("#!/bin/sh\necho 'not a browser' >&2\n")
    silent.chmod(0o755)
    with pytest.raises(TabError, match=r"gave no DevTools address.*\n.*not a browser"):
        with launch_chromium(playwright, executable_path=str(silent), timeout_s=5):
            pass


def test_python_that_holds_the_main_thread_is_bounded_by_the_driver(
        context: BrowserContext, pyjobq_site: Site) -> None:
    # A page timer cannot end a wait while synchronous Python holds the thread: the bound must
    # be the driver's. Three seconds busy, a one-second bound.
    tab = open_tab(context, pyjobq_site.url("tests/harness.html"), setup=SETUP)
    start = time.monotonic()
    with pytest.raises(TabError, match=r"within 1(\.0)? s: the page's main thread is busy"):
        tab.py("import time\ntime.sleep(3)\n'slept'", timeout_s=1)
    assert time.monotonic() - start < 2.5
    # Once the thread is free, the tab answers again.
    tab.page.wait_for_timeout(3000)
    assert tab.py("json.dumps(6 * 7)") == 42
    with pytest.raises(TabError, match="ZeroDivisionError"):
        tab.py("1 / 0")
    # 0 would be "no timeout" to Playwright: refused, naming the parameter.
    for bad in (0, -1):
        with pytest.raises(ValueError, match="timeout_s must be .* greater than 0"):
            tab.py("1", timeout_s=bad)
        with pytest.raises(ValueError, match="timeout_s must be"):
            tab.freeze(timeout_s=bad)
        with pytest.raises(ValueError, match="timeout_s must be"):
            tab.crash(timeout_s=bad)
        with pytest.raises(ValueError, match="timeout_s must be"):
            open_tab(context, pyjobq_site.url("tests/harness.html"), timeout_s=bad)
    # An empty or unknown status is a mistake of the test's, said at once.
    with pytest.raises(ValueError, match="unknown status 'finished'.*'done'"):
        tab.wait_for_status("x", "finished")
    with pytest.raises(ValueError, match="no status; give one or more of"):
        tab.wait_for_status("x", [])


def test_open_tab_closes_its_page_when_a_wait_fails(context: BrowserContext,
                                                    pyjobq_site: Site) -> None:
    # A failed open left its page running, in the test's context, for nobody: it is closed.
    with pytest.raises(TabError, match="Python was not ready"):
        open_tab(context, pyjobq_site.url("tests/blank.html"), timeout_s=1)
    assert context.pages == []
    with pytest.raises(TabError, match="ZeroDivisionError"):
        open_tab(context, pyjobq_site.url("tests/harness.html"), setup="1 / 0")
    assert context.pages == []
