"""docs/testing.md's cross-tab example in Python runs here as written: its block is executed
as this module's body, so pytest collects its fixtures and its test (``pyjobq_site`` comes
from pyjobq's plugin, pointed at build/site by pyproject.toml)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = (Path(__file__).resolve().parent.parent / "docs" / "testing.md").read_text()
_match = re.search(r"<!-- example: python-playwright-test -->\s*```python\n(.*?)```", DOC, re.S)
assert _match, "docs/testing.md has no example python-playwright-test"
exec(compile(_match.group(1), "docs/testing.md", "exec"))  # noqa: S102 - the example, as written


def test_the_example_defines_one_test() -> None:
    assert [name for name in globals() if name.startswith("test_the_other_tab")] == [
        "test_the_other_tab_finishes_a_note_once_when_the_processing_tab_crashes"]
