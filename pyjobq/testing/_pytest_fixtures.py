"""The plugin's option and fixture (loaded by :mod:`pyjobq.testing.pytest_plugin` only when
Playwright for Python is installed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._site import Site, serve_folder, site_at

HELP = ("where pyjobq_site finds your pages: a folder to serve (with the headers Pyodide "
        "needs), or the http(s):// address of a server you run")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pyjobq", "pyjobq cross-tab tests (Playwright)")
    group.addoption("--pyjobq-site", dest="pyjobq_site", default=None, help=HELP)
    parser.addini("pyjobq_site", HELP + "; a relative folder is relative to the ini file",
                  default="")


@pytest.fixture(scope="session")
def pyjobq_site(request: pytest.FixtureRequest) -> Iterator[Site]:
    """Where the pages under test are (``--pyjobq-site`` or the ``pyjobq_site`` ini option):
    ``pyjobq_site.url("app.html")``. A folder is served for the whole session."""
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
        yield site_at(given)
        return
    with serve_folder(base / given) as site:
        yield site
