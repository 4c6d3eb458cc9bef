"""One default, one constant: every ``max_attempts`` default in pyjobq is
``pyjobq.core.records.DEFAULT_MAX_ATTEMPTS``, and the docs state that value."""

from __future__ import annotations

import ast
import re

from pyjobq.core.records import DEFAULT_MAX_ATTEMPTS, NewJob
from source_scan import ROOT, sources  # tests/ is on sys.path


def literal_defaults() -> dict[str, list[str]]:
    """Each pyjobq file with the functions whose ``max_attempts`` default is a number of its own."""
    found: dict[str, list[str]] = {}
    for name, path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                # None: "the default of whatever the call is for" (an outbox handler's, say).
                if arg.arg == "max_attempts" and not (
                        isinstance(default, ast.Name) and default.id == "DEFAULT_MAX_ATTEMPTS"
                        or isinstance(default, ast.Constant) and default.value is None):
                    found.setdefault(name, []).append(f"{node.lineno}: {node.name}")
    return found


def test_every_max_attempts_default_is_the_constant() -> None:
    assert NewJob(id="j", reconstructor="r", params=None).max_attempts == DEFAULT_MAX_ATTEMPTS
    assert literal_defaults() == {}


def test_the_docs_state_the_default_the_code_has() -> None:
    stated = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text()
        stated += [(path.name, int(n)) for n in re.findall(r"max_attempts=(\d+)\b(?!\w)", text)
                   if re.search(rf"max_attempts={n}, delay_ms=0\)|max_attempts={n}\) ->", text)]
        stated += [(path.name, int(n)) for n in re.findall(r"`max_attempts`, default (\d+)", text)]
    assert stated and {n for _, n in stated} == {DEFAULT_MAX_ATTEMPTS}, stated
