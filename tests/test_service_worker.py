"""pyjobq's Service Worker, on plain CPython: the script ``python -m pyjobq.service_worker``
writes, the transport named by its import path, and what a page leaves for the Service Worker
(the drain itself runs in Chromium: tests/e2e/service_worker.spec.js)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from pyjobq.config import Settings
from pyjobq.service_worker import ServiceWorkerConfig, bundle, config_json, script

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, *, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                          capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": f"{ROOT}:{cwd}", "PATH": "/usr/bin:/bin"})


def test_the_script_imports_pyodide_statically_from_the_folder_given() -> None:
    index = "https://cdn.example/pyodide/v314.0.7/full"
    text = script(index)
    assert f'import createPyodideModule from "{index}/pyodide.asm.mjs";' in text
    assert f'import {{ loadPyodide }} from "{index}/pyodide.mjs";' in text
    # A Service Worker may not use dynamic import(), nor top-level await.
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    assert re.search(r"\bimport\s*\(", code) is None
    assert re.search(r"^await\b", code, re.M) is None
    assert "PYODIDE_INDEX" not in text
    assert text.endswith("\npyjobqServiceWorker(self);\n")
    part = script("/pyodide/", part=True)
    assert "export function pyjobqServiceWorker(scope)" in part
    assert "pyjobqServiceWorker(self)" not in part.split("export function", 1)[1].rsplit("}", 1)[1]


@pytest.mark.parametrize("index", ["", 'x"; evil("', "a\\b", "it's/"])
def test_the_script_refuses_a_folder_it_cannot_write_into_javascript(index: str) -> None:
    with pytest.raises(ValueError, match="--index must be the URL of a Pyodide folder"):
        script(index)


def test_the_command_writes_the_script_and_says_what_is_wrong() -> None:
    done = subprocess.run([sys.executable, "-m", "pyjobq.service_worker", "--index", "/pyodide/"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout == script("/pyodide/")
    bad = subprocess.run([sys.executable, "-m", "pyjobq.service_worker", "--index", 'a"b'],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "--index must be the URL of a Pyodide folder" in bad.stderr


def test_the_config_a_page_leaves_is_the_one_the_service_worker_reads() -> None:
    settings = Settings(db_name="notes", lock_name="notes-lock", channel_name="notes-news",
                        yields={"heavy": "busy"}, handshake_timeout_ms=5_000,
                        transport_path="app.transport:send")
    assert ServiceWorkerConfig.from_json(config_json(settings)) == ServiceWorkerConfig(
        db_name="notes", lock_name="notes-lock", channel_name="notes-news",
        transport="app.transport:send", yields={"heavy": "busy"}, handshake_timeout_ms=5_000)
    with pytest.raises(ValueError, match="import path"):
        config_json(Settings())


def _package(tmp_path: Path) -> None:
    (tmp_path / "swapp").mkdir()
    (tmp_path / "swapp" / "__init__.py").write_text("")
    send = "async def send(method, path, body):\n    return None\n"
    (tmp_path / "swapp" / "transport.py").write_text(send)
    (tmp_path / "swapp" / "sub").mkdir()
    (tmp_path / "swapp" / "sub" / "__init__.py").write_text("X = 1\n")
    (tmp_path / "single_transport.py").write_text(send)


def test_the_files_hold_pyjobq_and_the_transports_package(tmp_path: Path) -> None:
    _package(tmp_path)
    out = run_python("""
        import io, zipfile
        import swapp.transport, single_transport
        from pyjobq.service_worker import bundle
        ours = io.BytesIO()
        with zipfile.ZipFile(ours, "w") as z:
            z.writestr("pyjobq/__init__.py", "# pyjobq")
        for path in ("swapp.transport:send", "single_transport:send"):
            names = sorted(zipfile.ZipFile(io.BytesIO(bundle(ours.getvalue(), path))).namelist())
            print(path, names)
    """, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("swapp.transport:send ['pyjobq/__init__.py', 'swapp/__init__.py', "
                        "'swapp/sub/__init__.py', 'swapp/transport.py']")
    assert lines[1] == "single_transport:send ['pyjobq/__init__.py', 'single_transport.py']"
    pyjobq_only = io.BytesIO()
    with zipfile.ZipFile(pyjobq_only, "w") as z:
        z.writestr("pyjobq/__init__.py", "")
    alone = bundle(pyjobq_only.getvalue(), "pyjobq.testing:Response")
    assert zipfile.ZipFile(io.BytesIO(alone)).namelist() == ["pyjobq/__init__.py"]


def test_a_transport_given_by_its_import_path_is_imported_and_kept_by_name(tmp_path: Path) -> None:
    _package(tmp_path)
    out = run_python("""
        import pyjobq
        from pyjobq import config
        pyjobq.configure(transport="swapp.transport:send", service_worker="/sw.mjs")
        s = config.settings()
        print(s.transport.__module__, s.transport.__name__, s.transport_path, s.service_worker)
        import swapp.transport
        pyjobq.configure(transport=swapp.transport.send)   # the function: found by its own name
        print(config.settings().transport_path)
        async def local(method, path, body):
            return None
        pyjobq.configure(transport=local)                   # defined in __main__: no name
        print(config.settings().transport_path)
    """, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["swapp.transport send swapp.transport:send /sw.mjs",
                                       "swapp.transport:send", "None"]


@pytest.mark.parametrize(("path", "says"), [
    ("swapp.transport.send", "as 'module:function'"),
    ("no_such_module:send", "importing 'no_such_module' failed"),
    ("swapp.transport:nope", "'swapp.transport' has no 'nope'"),
    ("swapp.sub:X", "which is not a function"),
])
def test_a_transport_path_that_does_not_name_a_function_is_refused(tmp_path: Path, path: str,
                                                                   says: str) -> None:
    _package(tmp_path)
    out = run_python(f"""
        import pyjobq
        from pyjobq import config
        try:
            pyjobq.configure(transport={path!r})
        except pyjobq.ConfigurationError as exc:
            print("refused:", exc)
        print("transport:", config.settings().transport, config.settings().transport_path)
    """, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert says in out.stdout
    assert "transport: None None" in out.stdout  # nothing changed


def test_the_service_worker_url_is_fixed_once_the_queue_read_it() -> None:
    out = run_python("""
        import pyjobq
        from pyjobq.testing import Response
        async def send(method, path, body):
            return Response(200, {})
        pyjobq.configure(transport=send, service_worker="/sw.mjs")
        from pyjobq import queue
        pyjobq.configure(service_worker="/sw.mjs")          # the same again: fine
        try:
            pyjobq.configure(service_worker="/other-sw.mjs")
        except pyjobq.ConfigurationError as exc:
            print("refused:", "service_worker='/other-sw.mjs'" in str(exc))
        try:
            pyjobq.configure(service_worker="")
        except pyjobq.ConfigurationError as exc:
            print("empty:", exc)
    """)
    assert out.returncode == 0, out.stderr
    assert "refused: True" in out.stdout
    assert "empty: service_worker must be a non-empty URL str or None" in out.stdout
