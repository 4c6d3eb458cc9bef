"""Browser tests need the offline Pyodide distribution that `make build` writes."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    dist = config.option.dist_dir
    if (dist / "pyodide-lock.json").is_file():
        return
    skip = pytest.mark.skip(reason=f"no Pyodide distribution in {dist}: run `make build` first")
    for item in items:
        if "tests/browser/" in item.nodeid:
            item.add_marker(skip)
