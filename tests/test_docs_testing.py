"""docs/testing.md's examples are real tests: the CPython one runs here, the Playwright one is
tests/e2e/testing_docs.spec.js (run by ``npx playwright test``), word for word."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "testing.md").read_text()


def example(name: str) -> str:
    """The fenced block right after ``<!-- example: NAME -->``, as written."""
    match = re.search(rf"<!-- example: {name} -->\s*```[a-z]*\n(.*?)```", DOC, re.S)
    assert match, f"docs/testing.md has no example {name}"
    return match.group(1)


def _tests() -> list[tuple[str, Callable[[], Any]]]:
    namespace: dict[str, Any] = {"__name__": "docs_testing_example"}
    exec(compile(example("cpython-test"), "docs/testing.md", "exec"), namespace)
    return [(name, fn) for name, fn in namespace.items()
            if name.startswith("test_") and callable(fn)]


def test_the_cpython_example_has_tests() -> None:
    assert [name for name, _ in _tests()] == [
        "test_a_note_is_retried_after_a_503_and_posted_once_more",
        "test_when_the_processing_tab_crashes_another_tab_takes_over",
    ]


@pytest.mark.parametrize("name", [name for name, _ in _tests()])
def test_the_cpython_example_passes(name: str) -> None:
    dict(_tests())[name]()


def test_the_playwright_example_is_the_spec_playwright_runs() -> None:
    spec = ROOT / "tests" / "e2e" / "testing_docs.spec.js"
    assert example("playwright-test") == spec.read_text()


def test_the_playwright_helper_ships_in_the_package_and_is_documented() -> None:
    import pyjobq.testing

    helper = Path(pyjobq.testing.PLAYWRIGHT_HELPER)
    assert helper.is_file() and helper.name == "playwright.cjs"
    exported = re.search(r"module\.exports = \{(.*?)\};", helper.read_text(), re.S)
    assert exported
    names = [n.strip() for n in exported.group(1).split(",") if n.strip()]
    for name in names:
        assert f"`{name}(" in DOC, name  # every helper has its row in the docs


def test_the_docs_index_links_the_testing_page() -> None:
    assert "docs/testing.md" in (ROOT / "README.md").read_text()
