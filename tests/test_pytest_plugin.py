"""pyjobq's pytest plugin on CPython (no browser): the wheel registers it, it stays inactive
without Playwright for Python, and ``pyjobq_site`` serves a folder with the headers Pyodide
needs, takes the address of your own server, or says what to do when given neither."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyjobq.testing._site import serve_folder, site_at

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_registers_the_plugin() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"pyjobq": "pyjobq.testing.pytest_plugin"}


def test_the_plugin_always_registers_its_option_and_fixture_cheaply() -> None:
    # Without Playwright too: pyjobq's own pyproject sets the ini key, and a missing option or
    # fixture would be a confusing error. Importing it loads no server.
    code = ("import sys\nimport pyjobq.testing.pytest_plugin as p\n"
            "print(sorted(p.__all__), 'pyjobq.testing._site' in sys.modules, "
            "'http.server' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.stdout.split() == ["['pyjobq_site',", "'pytest_addoption']", "False", "False"], \
        run.stdout + run.stderr


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


def pytest_run(project: Path, *args: str, autoload: bool = False,
               path: tuple[Path, ...] = (), prelude: str = "") -> subprocess.CompletedProcess[str]:
    """pytest on ``project``, with the plugin from this tree. By default isolated: no plugin
    loads by itself (an installed pyjobq's entry point among them) and ``-p`` loads ours,
    which would otherwise be registered twice. ``autoload``: as a user runs it, the
    plugin found through its entry point only. ``prelude``: Python run before pytest."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (ROOT, *path)))}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    plugin: list[str] = []
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        plugin = ["-p", "pyjobq.testing.pytest_plugin"]
    argv = ["-q", "-s", "-p", "no:cacheprovider", *plugin, "-c", os.devnull,
            "--rootdir", str(project), *args, "test_site.py"]
    code = f"{prelude}\nimport sys, pytest\nsys.exit(pytest.main({argv!r}))"
    return subprocess.run([sys.executable, "-c", code], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)


def installed(tmp_path: Path) -> Path:
    """A folder that, on the path, makes pyjobq's pytest11 entry point visible, as an
    installed wheel does."""
    dist = tmp_path / "installed" / "pyjobq_wheel-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pyjobq-wheel\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\npyjobq = pyjobq.testing.pytest_plugin\n")
    return dist.parent


def test_the_plugin_tests_run_with_pyjobq_installed(project: Path, tmp_path: Path) -> None:
    # With the wheel installed, `-p pyjobq.testing.pytest_plugin` besides its entry point was
    # "Plugin already registered under a different name".
    run = pytest_run(project, "--pyjobq-site", "site", path=(installed(tmp_path),))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SITE http://127.0.0.1:" in run.stdout


def test_an_installed_plugin_loads_through_its_entry_point(project: Path, tmp_path: Path) -> None:
    run = pytest_run(project, "--pyjobq-site", "site", autoload=True,
                     path=(installed(tmp_path),))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SITE http://127.0.0.1:" in run.stdout


WITHOUT_PLAYWRIGHT = "sys_ = __import__('sys'); sys_.modules['playwright'] = None"


def test_without_playwright_the_option_and_ini_key_stand_and_the_fixture_says_why(
        project: Path) -> None:
    # Without Playwright the option was "unrecognized", the ini key warned, and the fixture was
    # "not found".
    (project / "pytest.ini").write_text("[pytest]\npyjobq_site = site\n")
    argv = ["-c", str(project / "pytest.ini"), "-W", "error::pytest.PytestConfigWarning"]
    run = pytest_run(project, "--pyjobq-site", "site", *argv, prelude=WITHOUT_PLAYWRIGHT)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "needs Playwright for Python: pip install playwright" in run.stdout
    assert "unrecognized" not in run.stderr and "not found" not in run.stdout
    assert "Traceback" not in run.stdout


def test_a_site_that_is_neither_a_folder_nor_an_address_is_named(project: Path) -> None:
    run = pytest_run(project, "--pyjobq-site=localhost:8000")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "'localhost:8000' is neither a folder" in run.stdout
    assert "or an http(s):// address" in run.stdout or "nor an http(s):// address" in run.stdout
    assert "Traceback" not in run.stdout and "FileNotFoundError" not in run.stdout
    run = pytest_run(project, "--pyjobq-site=ftp://example.com/")
    assert run.returncode == 1 and "not an http:// or https:// address" in run.stdout
    assert "ValueError" not in run.stdout


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


def test_a_symlinked_folder_inside_the_site_is_served(folder: Path, tmp_path: Path) -> None:
    # Resolving links made a linked folder "outside the site" (403); a path that climbs out of
    # the site is still refused.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "lib.js").write_text("export const y = 2;\n")
    (folder / "vendor").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (folder / "linked.txt").symlink_to(tmp_path / "secret.txt")
    with serve_folder(folder) as site:
        status, headers, body = get(site.base, "/vendor/lib.js")
        assert (status, headers["content-type"], body) == (200, "text/javascript",
                                                           b"export const y = 2;\n")
        assert get(site.base, "/vendor/../app/")[0] == 200
        assert get(site.base, "/%2e%2e/secret.txt")[0] in (403, 404)
        assert get(site.base, "/%2e%2e/%2e%2e/etc/passwd")[0] in (403, 404)


def test_a_malformed_path_is_answered_not_a_traceback(folder: Path) -> None:
    # A NUL or a name too long for the file system made the handler raise: each is answered.
    with serve_folder(folder) as site:
        assert get(site.base, "/a%00b")[0] == 400
        assert get(site.base, "/" + "x" * 300)[0] == 404
        assert get(site.base, "/" + "x" * 300 + "/index.html")[0] == 404
        assert get(site.base, "/app/")[0] == 200  # and it still answers
