"""The layers import only downward, and no module imports itself through others.

An AST walk of every module of the package (imports inside functions and ``TYPE_CHECKING``
blocks count: a deferred import hides a cycle, it does not remove it). The layers, bottom up:

- ``pyjobq.core``: pure decisions and vocabularies; imports nothing of pyjobq outside itself.
- the shared vocabulary ``pyjobq.codes``, ``pyjobq.errors``, ``pyjobq.abort``: leaves over the core.
- ``pyjobq.engine``: the scheduler and its parts, run in the worker and in the page; imports only
  the layers above and itself — nothing of the executor side, ``pyjobq.browser`` or the front.
- everything else (the executor side, the browser adapters, the front) may import the engine.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pyjobq"
VOCABULARY = {"pyjobq.codes", "pyjobq.errors", "pyjobq.abort"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str) -> Iterator[tuple[str, int]]:
    """Every pyjobq module ``name`` imports, anywhere in its body, with the line."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pyjobq":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "pyjobq":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else target), node.lineno


def within(name: str, layer: str) -> bool:
    return name == layer or name.startswith(layer + ".")


def test_the_walk_sees_the_package() -> None:
    assert {"pyjobq.core.status", "pyjobq.engine.scheduler", "pyjobq.executor.side",
            "pyjobq.browser.idb", "pyjobq.queue"} <= set(MODULES)
    assert ("pyjobq.engine.passes", 1) not in set(imports("pyjobq.engine.scheduler"))
    assert "pyjobq.engine.passes" in {t for t, _ in imports("pyjobq.engine.scheduler")}


@pytest.mark.parametrize("name", [n for n in MODULES if within(n, "pyjobq.core")])
def test_the_core_imports_nothing_of_pyjobq_outside_it(name: str) -> None:
    assert [(t, line) for t, line in imports(name) if not within(t, "pyjobq.core")] == []


@pytest.mark.parametrize("name", sorted(VOCABULARY))
def test_the_vocabulary_imports_only_the_core_and_itself(name: str) -> None:
    assert [(t, line) for t, line in imports(name)
            if not within(t, "pyjobq.core") and t not in VOCABULARY] == []


@pytest.mark.parametrize("name", [n for n in MODULES if within(n, "pyjobq.engine")])
def test_the_engine_imports_nothing_of_the_executor_side_the_browser_or_the_front(
        name: str) -> None:
    allowed = ("pyjobq.core", "pyjobq.engine", *VOCABULARY)
    assert [(t, line) for t, line in imports(name)
            if not any(within(t, layer) for layer in allowed)] == []


def test_no_import_cycle() -> None:
    graph = {name: sorted({t for t, _ in imports(name) if t in MODULES and t != name})
             for name in MODULES}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for target in graph[name]:
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name)
    assert cycles == []
