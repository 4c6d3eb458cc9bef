"""The API reference (``make docs``, scripts/api_docs.py) covers every public name, each documented.

Built in a fresh interpreter, as ``make docs`` does: pdoc reads the lazy names, which imports
``pyjobq.queue`` and reads the configured names for good — never in the test process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# For each public module, every public member pdoc documents (``__all__``, or what the module
# defines) with its docstring; variables count their ``#:`` comment.
SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, "scripts")
    import api_docs
    api_docs.build(__import__("pathlib").Path(sys.argv[1]))
    import pdoc.doc
    report = {}
    for name in api_docs.PUBLIC_MODULES:
        module = pdoc.doc.Module.from_name(name)
        report[name] = {m.name: m.docstring.strip() for m in module.members.values()
                        if not m.name.startswith("_") and not isinstance(m, pdoc.doc.Module)}
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, str]]]:
    pytest.importorskip("pdoc", reason="pdoc is in requirements-dev.txt: make setup")
    out = tmp_path_factory.mktemp("docs")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "does not resolve" not in done.stderr, done.stderr
    return out, json.loads(done.stdout.strip().splitlines()[-1])


def page(out: Path, module: str) -> str:
    return (out / (module.replace(".", "/") + ".html")).read_text()


def test_every_name_in_pyjobq_all_is_documented_in_the_reference(
        reference: tuple[Path, dict[str, dict[str, str]]]) -> None:
    import pyjobq

    out, report = reference
    html = page(out, "pyjobq")
    members = report["pyjobq"]
    assert sorted(members) == sorted(pyjobq.__all__)
    assert [name for name in pyjobq.__all__ if not members[name]] == []  # each has a docstring
    assert [name for name in pyjobq.__all__ if f'id="{name}"' not in html] == []
    for name in ("Outbox", "Prune", "current_job_id", "Status", "enqueue_fetch", "Completion"):
        assert f'id="{name}"' in html


def undocumented(report: dict[str, dict[str, str]], modules: list[str]) -> dict[str, list[str]]:
    missing = {
        module: [name for name, doc in report[module].items() if not doc] for module in modules}
    return {module: names for module, names in missing.items() if names}


def test_the_other_public_modules_are_in_the_reference_with_docstrings(
        reference: tuple[Path, dict[str, dict[str, str]]]) -> None:
    out, report = reference
    assert undocumented(report, [m for m in report if m != "pyjobq"]) == {}
    assert "install" in report["pyjobq.ui"] and "jobs_html" in report["pyjobq.ui"]
    assert "Store" in report["pyjobq.core.ports"] and "MemoryStore" in report["pyjobq.memory"]
    for module, members in report.items():
        html = page(out, module)
        missing = [name for name in members if not re.search(f'id="{re.escape(name)}"', html)]
        assert missing == [], module


def test_docs_api_md_points_to_the_generated_reference() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    assert "make docs" in text and "build/docs" in text
