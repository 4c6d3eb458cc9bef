"""Write pyjobq's API reference, generated from the docstrings by pdoc (``make docs``).

    python scripts/api_docs.py [OUTPUT_DIR]     (default: build/docs)

:data:`PUBLIC_MODULES` is the one list of what the reference covers: the package (every
name in ``pyjobq.__all__``), the ``<bg-jobs>`` / notebook module, the CPython testing
helpers and the cross-tab ones for pytest (which import Playwright for Python), the service
registry, and the ports and memory adapters for your own store or
tests. The engine's internals (scheduler, executor side, browser adapters) are not public.
tests/test_api_docs.py builds it the same way and checks every public name is in it.

Runs on plain CPython: pdoc imports each module, so importing ``pyjobq`` must start
nothing; reading ``pyjobq.enqueue_fetch`` imports ``pyjobq.queue``, which on CPython
only reads the configured names.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PUBLIC_MODULES = (
    "pyjobq",
    "pyjobq.ui",
    "pyjobq.testing",
    "pyjobq.testing.playwright",
    "pyjobq.services",
    "pyjobq.core",
    "pyjobq.core.ports",
    "pyjobq.memory",
)


def specs() -> list[str]:
    """pdoc's module specs: exactly :data:`PUBLIC_MODULES`, none of their other submodules."""
    return ["pyjobq", r"!pyjobq\.", *PUBLIC_MODULES[1:]]


def build(output: Path) -> Path:
    """Write the HTML reference into ``output``; returns the path of its front page."""
    sys.path.insert(0, str(ROOT))
    import pdoc
    import pdoc.render

    import pyjobq

    for name in pyjobq.__all__:
        getattr(pyjobq, name)  # load the lazy names: pdoc documents what the module holds
    pdoc.render.configure(docformat="google", show_source=False,
                          footer_text="pyjobq — generated from the docstrings by `make docs`")
    pdoc.pdoc(*specs(), output_directory=output)
    return output / "pyjobq.html"


def main(argv: list[str]) -> int:
    output = Path(argv[1]) if len(argv) > 1 else ROOT / "build" / "docs"
    front = build(output)
    print(f"[api_docs] wrote {output} ({', '.join(PUBLIC_MODULES)}); open {front}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
