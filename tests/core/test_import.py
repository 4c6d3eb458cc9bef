"""The core imports on plain CPython, and configuring does not import the queue."""

from __future__ import annotations

import json
import subprocess
import sys

CORE = ["pyjobq", "pyjobq.codes", "pyjobq.core", "pyjobq.core.backoff", "pyjobq.core.lanes",
        "pyjobq.core.messages", "pyjobq.core.policy", "pyjobq.core.ports", "pyjobq.core.records",
        "pyjobq.core.status", "pyjobq.config", "pyjobq.errors", "pyjobq.memory",
        "pyjobq.engine.scheduler", "pyjobq.executor.side", "pyjobq.executor.fetch", "pyjobq.abort",
        "pyjobq.testing", "pyjobq.hosts"]


def loaded_after(code: str) -> set[str]:
    """Run ``code`` in a fresh interpreter; return the modules it left in sys.modules."""
    script = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_core_imports_without_js_or_pyodide() -> None:
    modules = loaded_after("\n".join(f"import {name}" for name in CORE))
    assert set(CORE) <= modules
    assert {m for m in modules if m.split(".")[0] in ("js", "pyodide", "pyodide_js")} == set()
    assert {m for m in modules if m.startswith("pyjobq.browser")} == set()


def test_configure_does_not_import_the_queue() -> None:
    modules = loaded_after("import pyjobq.config\nimport pyjobq\npyjobq.configure(db_name='x')")
    assert "pyjobq.queue" not in modules
    assert "pyjobq.config" in modules
