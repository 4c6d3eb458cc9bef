"""pyjobq's pytest plugin: the ``pyjobq_site`` fixture for cross-tab tests in Chromium.

Registered by the wheel's ``pytest11`` entry point, and inactive (no option, no fixture)
unless Playwright for Python is installed: a project that only runs pyjobq's CPython kit
gets nothing from it. The helpers themselves are in :mod:`pyjobq.testing.playwright`
(docs/testing.md, "Cross-tab tests in Python").

``pyjobq_site`` (session-scoped) is where your pages are, a :class:`~pyjobq.testing._site.Site`:
``pyjobq_site.url("app.html")``. Point it at them with ``--pyjobq-site`` or the ``pyjobq_site``
ini option: a folder (served on ``127.0.0.1`` with the headers Pyodide needs, for the test
session) or the ``http(s)://`` address of a server you run. Or override the fixture.
"""

from __future__ import annotations

from importlib.util import find_spec

if find_spec("playwright") is not None:
    from ._pytest_fixtures import pyjobq_site, pytest_addoption

    __all__ = ["pyjobq_site", "pytest_addoption"]
else:
    __all__ = []
