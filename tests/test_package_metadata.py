"""The README is also pyjobq's PyPI page: every link in it must work there, off the repository."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_links_are_absolute() -> None:
    readme = (ROOT / "README.md").read_text()
    links = (re.findall(r"\]\(([^)]+)\)", readme)
             + re.findall(r'(?:href|src)="([^"]+)"', readme.split("<!-- example:")[0]))
    assert links, "the README links to its docs"
    relative = [link for link in links if not re.match(r"https?://", link)]
    assert relative == [], f"links that break on PyPI: {relative}"


def test_the_wheel_names_its_license_and_urls() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(project["urls"])
