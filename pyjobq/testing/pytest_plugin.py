"""pyjobq's pytest plugin: the ``pyjobq_site`` fixture for cross-tab tests in Chromium.

Registered by the wheel's ``pytest11`` entry point: once the wheel is installed, pytest loads
it by itself (do not add ``-p pyjobq.testing.pytest_plugin`` or ``pytest_plugins`` too: pytest
would refuse a plugin registered twice). The option, the ini key and the fixture are always
there (they need only the standard library, and importing this module costs nothing more);
the fixture fails, saying what to install, when a test uses it without Playwright for Python.
The helpers themselves are in :mod:`pyjobq.testing.playwright` (docs/testing.md, "Cross-tab
tests in Python").

``pyjobq_site`` (session-scoped) is where your pages are, a :class:`~pyjobq.testing._site.Site`:
``pyjobq_site.url("app.html")``. Point it at them with ``--pyjobq-site`` or the ``pyjobq_site``
ini option: a folder (served on ``127.0.0.1`` with the headers Pyodide needs, for the test
session) or the ``http(s)://`` address of a server you run. Or override the fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ._site import Site

__all__ = ["pyjobq_site", "pytest_addoption"]

HELP = ("where pyjobq_site finds your pages: a folder to serve (with the headers Pyodide "
        "needs), or the http(s):// address of a server you run")

NEEDS_PLAYWRIGHT = ("pyjobq_site (cross-tab tests in Chromium) needs Playwright for Python: "
                    "pip install playwright, and give launch_chromium(executable_path=...) "
                    "the Chromium your machine has")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pyjobq", "pyjobq cross-tab tests (Playwright)")
    group.addoption("--pyjobq-site", dest="pyjobq_site", default=None, help=HELP)
    parser.addini("pyjobq_site", HELP + "; a relative folder is relative to the ini file",
                  default="")


@pytest.fixture(scope="session")
def pyjobq_site(request: pytest.FixtureRequest) -> Iterator[Site]:
    """Where the pages under test are (``--pyjobq-site`` or the ``pyjobq_site`` ini option):
    ``pyjobq_site.url("app.html")``. A folder is served for the whole session."""
    if find_spec("playwright") is None:
        pytest.fail(NEEDS_PLAYWRIGHT, pytrace=False)
    from ._site import serve_folder, site_at

    config = request.config
    given: str | None = config.getoption("pyjobq_site")
    base = Path.cwd()
    if not given:
        given = str(config.getini("pyjobq_site") or "")
        base = config.inipath.parent if config.inipath else config.rootpath
    if not given:
        pytest.fail(
            "pyjobq_site: no site given. Run pytest with --pyjobq-site=FOLDER_OR_URL, set "
            "pyjobq_site = FOLDER_OR_URL in your pytest ini options, or override the "
            "pyjobq_site fixture in your conftest.py", pytrace=False)
    if "://" in given:
        try:
            site = site_at(given)
        except ValueError as e:
            pytest.fail(str(e), pytrace=False)
        yield site
        return
    folder = base / given
    if not folder.is_dir():
        pytest.fail(f"pyjobq_site: {given!r} is neither a folder (no {folder}) nor an "
                    "http(s):// address; give the folder that holds your pages or the "
                    "address of your server, e.g. http://localhost:8000/", pytrace=False)
    with serve_folder(folder) as served:
        yield served
