"""The layers import only downward, no package imports itself through others, and no module
imports itself through others.

An AST walk of every module of the package (imports inside functions and ``TYPE_CHECKING``
blocks count: a deferred import hides a cycle, it does not remove it). Every package (and every
module at the top of ``pyjobq/``) has a rank (:data:`RANKS`); a module imports only its own rank
and below, and the packages' import graph has no cycle. The layers, bottom up:

- ``pyjobq.core``: pure decisions and vocabularies (the error codes and errors among them);
  imports nothing of pyjobq outside itself.
- the leaves ``pyjobq.codes``, ``pyjobq.errors`` (the public paths of the core's),
  ``pyjobq.abort`` (the executors' signal) and ``pyjobq.loop`` (the event-loop helpers): over
  the core only; beside them the settings and the Service Worker's script and config.
- ``pyjobq.engine``: the scheduler and its parts, run in the worker and in the page; imports only
  the core, the loop helpers and itself — nothing of the executor side, ``pyjobq.browser`` or
  the front.
- then the executor side (``pyjobq.executor``, with the Service Worker's drain), the browser's
  adapters (``pyjobq.browser``, with the Service Worker's own and its page's part), the hosts
  that assemble a queue (``pyjobq.hosts``, with ``pyjobq.testing`` beside it) and the public
  front; the scheduler worker loads nothing of the page's side. A feature's folder
  (``pyjobq.service_worker``) ranks each of its modules where its imports put it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pyjobq"
LEAVES = {"pyjobq.codes", "pyjobq.errors", "pyjobq.abort", "pyjobq.loop"}

#: Each package's rank, bottom up: a module imports only packages of its rank or below.
RANKS: dict[str, int] = {
    "pyjobq.core": 0,
    **dict.fromkeys(["pyjobq.codes", "pyjobq.errors", "pyjobq.abort", "pyjobq.loop",
                     "pyjobq.config", "pyjobq.service_worker", "pyjobq.services"], 1),
    **dict.fromkeys(["pyjobq.engine", "pyjobq.memory", "pyjobq.handle"], 2),
    **dict.fromkeys(["pyjobq.executor", "pyjobq.service_worker.drain"], 3),
    **dict.fromkeys(["pyjobq.browser", "pyjobq.service_worker.worker",
                     "pyjobq.service_worker.page"], 4),
    **dict.fromkeys(["pyjobq.hosts", "pyjobq.testing"], 5),
    **dict.fromkeys(["pyjobq", "pyjobq.queue", "pyjobq.notebook", "pyjobq.outbox", "pyjobq.ui",
                     "pyjobq.tasks"], 6),
}


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


def not_run_on_import(name: str) -> set[int]:
    """The lines of ``name`` that importing it does not run: function bodies, and the body of
    ``if TYPE_CHECKING:``."""
    tree = ast.parse(MODULES[name].read_text())
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body: list[ast.stmt] = node.body
        elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            body = node.body
        else:
            continue
        for inner in body:
            lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def loaded_by(root: str) -> set[str]:
    """Every pyjobq module that importing ``root`` loads (each module's packages included)."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        packages = (".".join(parts[:i]) for i in range(1, len(parts)))
        todo += [package for package in packages if package in MODULES]
        skip = not_run_on_import(name)
        todo += [t for t, line in imports(name) if t in MODULES and line not in skip]
    return seen


def within(name: str, layer: str) -> bool:
    return name == layer or name.startswith(layer + ".")


def package_of(name: str) -> str:
    """The ranked package ``name`` belongs to (a module at the top is its own)."""
    return max((p for p in RANKS if within(name, p)), key=len)


def package_graph() -> dict[str, set[tuple[str, str]]]:
    """Package -> every (module's import, at line) of another package, as ``"module:line"``
    beside the imported module."""
    graph: dict[str, set[tuple[str, str]]] = {p: set() for p in RANKS}
    for name in MODULES:
        for target, line in imports(name):
            if target in MODULES and package_of(target) != package_of(name):
                graph[package_of(name)].add((f"{name}:{line}", target))
    return graph


def upward(graph: dict[str, set[tuple[str, str]]]) -> list[str]:
    """Every import in ``graph`` of a package ranked above the importer's."""
    return sorted(f"{at} imports {target}" for package, edges in graph.items()
                  for at, target in edges if RANKS[package_of(target)] > RANKS[package])


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Every cycle of ``graph`` (node -> the nodes it imports), each found once per node it
    enters."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in graph[node]:
            if state.get(target) == 1:
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node)
    return found


def package_cycles(graph: dict[str, set[tuple[str, str]]]) -> list[list[str]]:
    """Every cycle of the packages' import graph."""
    return cycles({p: sorted({package_of(t) for _, t in edges}) for p, edges in graph.items()})


def test_every_module_has_a_ranked_package() -> None:
    assert [n for n in MODULES if not any(within(n, p) for p in RANKS)] == []


def test_no_package_imports_a_package_ranked_above_it() -> None:
    assert upward(package_graph()) == []


def test_the_packages_import_one_another_in_no_cycle() -> None:
    assert package_cycles(package_graph()) == []


def test_production_code_never_imports_the_test_kits() -> None:
    # pyjobq.testing holds the fakes (the clock that moves when told to, freezable ports) and
    # the simulation: nothing a page, a worker or a kernel runs may load them.
    assert sorted(f"{name}:{line} imports {target}" for name in MODULES
                  if not within(name, "pyjobq.testing")
                  for target, line in imports(name) if within(target, "pyjobq.testing")) == []


def test_a_planted_upward_import_and_a_planted_cycle_are_found() -> None:
    # A function-level import of the browser from the executor (ranked below it), and the
    # browser importing the executor back: both checks must see them.
    planted = package_graph()
    planted["pyjobq.executor"].add(("pyjobq.executor.side:1", "pyjobq.browser.page_main"))
    assert upward(planted) == ["pyjobq.executor.side:1 imports pyjobq.browser.page_main"]
    assert ["pyjobq.executor", "pyjobq.browser", "pyjobq.executor"] in package_cycles(planted)
    same_rank = package_graph()
    same_rank["pyjobq.engine"].add(("pyjobq.engine.scheduler:1", "pyjobq.memory"))
    same_rank["pyjobq.memory"].add(("pyjobq.memory.store:1", "pyjobq.engine.scheduler"))
    assert upward(same_rank) == []
    assert ["pyjobq.engine", "pyjobq.memory", "pyjobq.engine"] in package_cycles(same_rank)


def test_the_walk_sees_the_package() -> None:
    assert {"pyjobq.core.status", "pyjobq.engine.scheduler", "pyjobq.executor.side",
            "pyjobq.browser.idb", "pyjobq.queue"} <= set(MODULES)
    assert ("pyjobq.engine.passes", 1) not in set(imports("pyjobq.engine.scheduler"))
    assert "pyjobq.engine.passes" in {t for t, _ in imports("pyjobq.engine.scheduler")}


@pytest.mark.parametrize("name", [n for n in MODULES if within(n, "pyjobq.core")])
def test_the_core_imports_nothing_of_pyjobq_outside_it(name: str) -> None:
    assert [(t, line) for t, line in imports(name) if not within(t, "pyjobq.core")] == []


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_the_leaves_import_only_the_core(name: str) -> None:
    assert [(t, line) for t, line in imports(name)
            if not within(t, "pyjobq.core")] == []


@pytest.mark.parametrize("name", [n for n in MODULES if within(n, "pyjobq.engine")])
def test_the_engine_imports_nothing_of_the_executor_side_the_browser_or_the_front(
        name: str) -> None:
    allowed = ("pyjobq.core", "pyjobq.loop", "pyjobq.engine")
    assert [(t, line) for t, line in imports(name)
            if not any(within(t, layer) for layer in allowed)] == []


def test_the_scheduler_worker_loads_nothing_of_the_page_side_or_the_front() -> None:
    # The worker boots Pyodide and pyjobq for its scheduler alone: a page module loaded there is
    # time and memory spent in every tab's worker (and a sign the layers have mixed).
    # (``import pyjobq`` itself loads ``configure`` and the ``Job`` type: light, and every
    # ``pyjobq.x`` import runs it.)
    page_side = ("pyjobq.executor", "pyjobq.queue", "pyjobq.outbox", "pyjobq.ui", "pyjobq.notebook",
                 "pyjobq.browser.page_main", "pyjobq.browser.lifecycle", "pyjobq.browser.bg_jobs",
                 "pyjobq.service_worker.page", "pyjobq.testing")
    loaded = loaded_by("pyjobq.browser.worker_main")
    assert {"pyjobq.engine.scheduler", "pyjobq.browser.idb"} <= loaded
    assert sorted(n for n in loaded if any(within(n, side) for side in page_side)) == []


def test_no_import_cycle() -> None:
    graph = {name: sorted({t for t, _ in imports(name) if t in MODULES and t != name})
             for name in MODULES}
    assert cycles(graph) == []
