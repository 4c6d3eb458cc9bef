"""Test-wide setup.

Browser tests (tests/browser, via pytest-pyodide) need Chromium; everything else runs on plain
CPython and must not pay for it. pytest-pyodide's own ``playwright_browsers`` fixture calls
``playwright.chromium.launch()``, which wants Playwright's own bundled browser — never present here,
since nothing but the package registries is reachable — so it is overridden here to launch Debian's
chromium by path. Like the original it is module-scoped and only instantiated by tests that request
a ``selenium*`` fixture, so CPython tests never start a browser.
"""

from __future__ import annotations

import json
import os
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

# pyjobq's pytest plugin (the pyjobq_site fixture): an installed wheel registers it through its
# pytest11 entry point; run from the source tree, the suite registers it here.
if not any(ep.value == "pyjobq.testing.pytest_plugin" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["pyjobq.testing.pytest_plugin"]

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
# Flags that keep Chromium quiet offline (DESIGN.md, "Offline toolchain"); Playwright's config
# reads the same file.
CHROMIUM_ARGS = json.loads(Path(__file__).with_name("chromium-flags.json").read_text())


@pytest.fixture(scope="module")
def playwright_browsers(request):
    """Mirror of pytest_pyodide.fixture.playwright_browsers, launching /usr/bin/chromium."""
    if request.config.option.runner.lower() != "playwright":
        yield {}
        return

    from playwright.sync_api import sync_playwright
    from pytest_pyodide.config import get_global_config
    from pytest_pyodide.hook import pytest_wrapper

    runtimes = pytest_wrapper.pyodide_runtimes
    unsupported = set(runtimes) - {"chrome"}
    if unsupported:
        pytest.exit(f"only --runtime chrome is wired up here, got {sorted(unsupported)}",
                    returncode=1)

    flags = [*get_global_config().get_flags("chrome"), *CHROMIUM_ARGS]
    with sync_playwright() as p:
        browsers: dict[str, Any] = {}
        try:
            if "chrome" in runtimes:
                browsers["chrome"] = p.chromium.launch(executable_path=CHROMIUM, args=flags,
                                                       headless=True)
        except Exception as e:  # noqa: BLE001 - turn any launch failure into one clear exit
            pytest.exit(f"playwright failed to launch {CHROMIUM}\n{e}", returncode=1)
        try:
            yield browsers
        finally:
            for browser in browsers.values():
                browser.close()
