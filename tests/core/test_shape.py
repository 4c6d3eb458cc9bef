"""No class of the package over 350 lines, no function over 60 (a docstring not counted).

A class past that size is several things at once, a function past it several steps; split
them by what they do (docs/decisions.md, "The house").
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pyjobq"
MAX_CLASS, MAX_FUNCTION = 350, 60


def span(node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The node's lines, less its own docstring's."""
    lines = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def oversized() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and span(node) > MAX_CLASS:
                found.append(f"{path.relative_to(PACKAGE.parent)}: class {node.name}, {span(node)}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and span(node) > MAX_FUNCTION:
                found.append(f"{path.relative_to(PACKAGE.parent)}: {node.name}(), {span(node)}")
    return found


def test_the_measure_counts_lines_less_the_docstring() -> None:
    tree = ast.parse('def f():\n    """Doc\n    string."""\n    a = 1\n    return a\n')
    assert isinstance(tree.body[0], ast.FunctionDef) and span(tree.body[0]) == 3


def test_no_class_over_350_lines_and_no_function_over_60() -> None:
    assert oversized() == []
