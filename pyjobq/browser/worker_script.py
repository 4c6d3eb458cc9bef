"""``python -m pyjobq.browser.worker_script > pyjobq-worker.mjs``: pyjobq's scheduler worker
script, to serve on your origin — for the preload line (docs/guide.md, "Start the worker with
the page") or ``configure(worker_url=...)`` under a Content-Security-Policy without
``worker-src blob:``. Serve the copy of the pyjobq version your pages load, and write it out
again when you upgrade.
"""

from __future__ import annotations

import sys
from importlib import resources


def source() -> str:
    """The worker script of this pyjobq, as the page's Blob-URL worker runs it."""
    return resources.files("pyjobq.browser").joinpath("worker.mjs").read_text(encoding="utf-8")


def main() -> None:
    sys.stdout.write(source())


if __name__ == "__main__":
    main()
