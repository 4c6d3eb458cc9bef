"""What the vocabulary tests read of pyjobq's own source: lines that spell out what one table
holds (an error code, a status set)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

ROOT = Path(__file__).resolve().parent.parent


def sources() -> list[tuple[str, Path]]:
    """Every pyjobq source file, by its name from the repository's root."""
    return [(path.relative_to(ROOT).as_posix(), path)
            for path in sorted((ROOT / "pyjobq").rglob("*.py"))]


def lines_matching(pattern: re.Pattern[str], *, skip: Iterable[str] = ()) -> dict[str, list[str]]:
    """Each pyjobq file (but those in ``skip``) with its ``"line: text"`` lines ``pattern``
    finds."""
    found: dict[str, list[str]] = {}
    for name, path in sources():
        lines = [f"{number}: {line.strip()}"
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if pattern.search(line)]
        if lines and name not in skip:
            found[name] = lines
    return found

