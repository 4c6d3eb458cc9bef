"""pyjobq's pytest plugin on CPython (no browser): the wheel registers it, it stays inactive
without Playwright for Python, and ``pyjobq_site`` serves a folder with the headers Pyodide
needs, takes the address of your own server, or says what to do when given neither."""

from __future__ import annotations

import http.client
import importlib.util
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pyjobq.testing._site import serve_folder, site_at

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "pyjobq" / "testing" / "pytest_plugin.py"
FIND_SPEC = importlib.util.find_spec


def test_the_wheel_registers_the_plugin() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"pyjobq": "pyjobq.testing.pytest_plugin"}


def load_plugin(monkeypatch: pytest.MonkeyPatch, playwright_installed: bool) -> ModuleType:
    """A fresh copy of the plugin module, as pytest would import it, with or without
    Playwright for Python found."""
    def find_spec(name: str, *args: Any) -> Any:
        return FIND_SPEC(name, *args) if playwright_installed or name != "playwright" else None

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    spec = importlib.util.spec_from_file_location("pyjobq.testing._plugin_copy", PLUGIN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plugin_is_inactive_without_playwright(monkeypatch: pytest.MonkeyPatch) -> None:
    without = load_plugin(monkeypatch, playwright_installed=False)
    assert without.__all__ == []
    assert not hasattr(without, "pyjobq_site") and not hasattr(without, "pytest_addoption")
    with_it = load_plugin(monkeypatch, playwright_installed=True)
    assert with_it.__all__ == ["pyjobq_site", "pytest_addoption"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "site" / "pyodide").mkdir(parents=True)
    (tmp_path / "site" / "pyodide" / "pyodide.mjs").write_text("export const x = 1;\n")
    (tmp_path / "site" / "pyodide" / "pyodide.asm.wasm").write_bytes(b"\0asm\1\0\0\0")
    (tmp_path / "site" / "app").mkdir()
    (tmp_path / "site" / "app" / "index.html").write_text("<!doctype html>app\n")
    (tmp_path / "secret.txt").write_text("not served\n")
    return tmp_path / "site"


def get(base: str, path: str) -> tuple[int, dict[str, str], bytes]:
    host, port = base.removeprefix("http://").rstrip("/").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def test_a_served_folder_has_the_headers_pyodide_needs(folder: Path) -> None:
    extra = {"Cross-Origin-Opener-Policy": "same-origin"}
    with serve_folder(folder, headers=extra) as site:
        assert site.folder == folder.resolve()
        status, headers, body = get(site.base, "/pyodide/pyodide.mjs")
        assert (status, headers["content-type"], body) == (200, "text/javascript",
                                                           b"export const x = 1;\n")
        assert headers["cache-control"] == "no-store"
        assert headers["access-control-allow-origin"] == "*"
        assert headers["cross-origin-opener-policy"] == "same-origin"
        status, headers, _ = get(site.base, "/pyodide/pyodide.asm.wasm")
        assert (status, headers["content-type"]) == (200, "application/wasm")
        status, headers, _ = get(site.base, "/app?x=1")
        assert (status, headers["location"]) == (301, "/app/?x=1")
        assert get(site.base, "/app/")[2] == b"<!doctype html>app\n"
        assert get(site.base, "/nothing.js")[0] == 404
        assert get(site.base, "/%2e%2e/secret.txt")[0] in (403, 404)
        assert b"not served" not in get(site.base, "/../secret.txt")[2]


def test_a_missing_folder_is_named() -> None:
    with pytest.raises(FileNotFoundError, match="no-such-site is not a folder"):
        with serve_folder("no-such-site"):
            pass


def test_a_server_of_your_own_is_taken_by_its_address() -> None:
    site = site_at("http://127.0.0.1:8000/app")
    assert site.base == "http://127.0.0.1:8000/app/" and site.folder is None
    assert site.url("index.html") == "http://127.0.0.1:8000/app/index.html"
    assert site.url("/tests/harness.html") == "http://127.0.0.1:8000/app/tests/harness.html"
    with pytest.raises(ValueError, match="not an http:// or https:// address"):
        site_at("file:///srv/site")


@pytest.fixture
def project(tmp_path: Path, folder: Path) -> Iterator[Path]:
    """A project of a pyjobq user: one test that reads a page through pyjobq_site."""
    (tmp_path / "test_site.py").write_text(textwrap.dedent("""
        import urllib.request

        def test_site(pyjobq_site):
            with urllib.request.urlopen(pyjobq_site.url("app/"), timeout=10) as answer:
                assert answer.read() == b"<!doctype html>app\\n"
            print("SITE", pyjobq_site.base)
    """))
    yield tmp_path


def pytest_run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "-p", "pyjobq.testing.pytest_plugin", "-c", os.devnull, "--rootdir", str(project),
         *args, "test_site.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120)


def test_pyjobq_site_serves_the_folder_it_is_given(project: Path) -> None:
    run = pytest_run(project, "--pyjobq-site", "site")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SITE http://127.0.0.1:" in run.stdout


def test_pyjobq_site_without_a_site_says_how_to_give_one(project: Path) -> None:
    run = pytest_run(project)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "pyjobq_site: no site given. Run pytest with --pyjobq-site=FOLDER_OR_URL" in run.stdout


def test_pyjobq_site_takes_the_address_of_your_own_server(project: Path, folder: Path) -> None:
    with serve_folder(folder) as yours:
        run = pytest_run(project, f"--pyjobq-site={yours.base}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SITE {yours.base}\n" in run.stdout
