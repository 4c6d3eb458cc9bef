"""pyjobq's Service Worker, which drains the queue when every tab is closed.

``python -m pyjobq.service_worker --index /pyodide/ > sw.mjs`` writes the script to serve on
your origin (``--index``: the folder of the Pyodide distribution it loads, on any origin;
a Service Worker imports Pyodide statically, so the folder is written into the script), and
``configure(service_worker="/sw.mjs", transport="app.transport:send")`` turns it on:
docs/service-worker.md has the whole setup and its limits.

The names here are shared by the page's side (:mod:`pyjobq.browser.sw_page`), the Service
Worker's (:mod:`pyjobq.browser.sw_main`) and the script.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources

#: The Cache Storage cache where a page leaves what the Service Worker needs.
CACHE = "pyjobq-service-worker"
#: Background Sync tags are ``pyjobq:<db_name>``.
SYNC_TAG_PREFIX = "pyjobq:"
#: Stands for the Pyodide folder in the script's template.
_INDEX = "PYODIDE_INDEX"


def cache_path(db_name: str, name: str) -> str:
    """The path, on the origin, of the cached file ``name`` for the queue ``db_name``."""
    from urllib.parse import quote

    return f"/__pyjobq-sw/{quote(db_name, safe='')}/{name}"


def sync_tag(db_name: str) -> str:
    return SYNC_TAG_PREFIX + db_name


def script(index: str) -> str:
    """The Service Worker script, loading Pyodide from the folder ``index``.

    Raises:
        ValueError: ``index`` is empty or holds a quote or a backslash (it is written into
            JavaScript string literals).
    """
    if not index or any(c in index for c in "\"'`\\\n"):
        raise ValueError(f"--index must be the URL of a Pyodide folder, got {index!r}")
    if not index.endswith("/"):
        index += "/"
    template = resources.files("pyjobq.browser").joinpath("service_worker.mjs").read_text(
        encoding="utf-8")
    return template.replace(_INDEX, index)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyjobq.service_worker",
        description="Write pyjobq's Service Worker script (serve it on your origin, then "
                    "configure(service_worker=<its URL>)).")
    parser.add_argument("--index", default="/pyodide/",
                        help="the folder of the Pyodide distribution the Service Worker loads "
                             "(default: /pyodide/); the same as your pages' is best")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(script(args.index))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
