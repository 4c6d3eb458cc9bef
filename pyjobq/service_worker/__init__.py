"""pyjobq's Service Worker, which drains the queue when every tab is closed.

``python -m pyjobq.service_worker --index /pyodide/ > sw.mjs`` writes the script to serve on
your origin (``--index``: the folder of the Pyodide distribution it loads, on any origin;
a Service Worker imports Pyodide statically, so the folder is written into the script), and
``configure(service_worker="/sw.mjs", transport="app.transport:send")`` turns it on:
docs/service-worker.md has the whole setup and its limits.

The names here are shared by the page's side (:mod:`pyjobq.service_worker.page`), the Service
Worker's (:mod:`pyjobq.service_worker.worker`) and the script.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import zipfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Mapping

from ..config import Settings

#: The Cache Storage cache where a page leaves what the Service Worker needs.
CACHE = "pyjobq-service-worker"
#: Background Sync tags are ``pyjobq:<db_name>``.
SYNC_TAG_PREFIX = "pyjobq:"
#: What JavaScript's ``encodeURIComponent`` leaves unescaped besides letters and digits.
_URI_COMPONENT_SAFE = "-_.!~*'()"
#: Stands for the Pyodide folder in the script's template.
_INDEX = "PYODIDE_INDEX"


@dataclass(frozen=True)
class ServiceWorkerConfig:
    """What a page leaves for the Service Worker (``config.json``: :func:`config_json` writes it,
    :meth:`from_json` reads it in the Service Worker)."""

    db_name: str
    lock_name: str
    channel_name: str
    transport: str
    yields: Mapping[str, str]
    handshake_timeout_ms: float
    #: The persistent tasks the Service Worker can run: name -> the module that declares it.
    tasks: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str) -> "ServiceWorkerConfig":
        data = json.loads(text)
        return cls(db_name=str(data["db_name"]), lock_name=str(data["lock_name"]),
                   channel_name=str(data["channel_name"]), transport=str(data["transport"]),
                   yields={str(k): str(v) for k, v in dict(data.get("yields") or {}).items()},
                   handshake_timeout_ms=float(data.get("handshake_timeout_ms") or 10_000),
                   tasks={str(k): str(v) for k, v in dict(data.get("tasks") or {}).items()})


def config_json(settings: Settings) -> str:
    """What the Service Worker reads to drain this queue (:class:`ServiceWorkerConfig`): with
    the tasks it can import (``settings.reconstructor_modules``)."""
    if settings.transport_path is None:
        raise ValueError("the Service Worker needs the transport's import path")
    return json.dumps({
        "db_name": settings.db_name, "lock_name": settings.lock_name,
        "channel_name": settings.channel_name, "transport": settings.transport_path,
        "yields": dict(settings.yields), "handshake_timeout_ms": settings.handshake_timeout_ms,
        "tasks": dict(settings.reconstructor_modules),
    })


def bundle(pyjobq_files: bytes, transport_path: str, modules: Iterable[str] = ()) -> bytes:
    """``pyjobq_files`` (the zip of the pyjobq this page imported) with the top-level package
    (or module) of the transport and of each of ``modules`` (the tasks'), as one zip the
    Service Worker puts on its ``sys.path``."""
    tops = {transport_path.partition(":")[0].split(".")[0]}
    tops.update(module.split(".")[0] for module in modules)
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(pyjobq_files)) as ours, \
            zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for item in ours.infolist():
            archive.writestr(item, ours.read(item))
        for top in sorted(tops - {"pyjobq"}):
            _add_module(archive, top)
    return buffer.getvalue()


def _add_module(archive: zipfile.ZipFile, top: str) -> None:
    module = sys.modules.get(top)
    file = getattr(module, "__file__", None)
    folders = [Path(p) for p in getattr(module, "__path__", None) or []]
    if file and Path(file).name != "__init__.py":
        archive.writestr(f"{top}.py", Path(file).read_bytes())
        return
    if not folders:
        raise RuntimeError(
            f"the module {top!r} (the transport's, or a task's) is not imported from files this "
            "page can read, so the Service Worker cannot be given it: import it from a .py file "
            "or a package folder (PyScript: its config's \"files\")")
    for folder in folders:  # a package, or a namespace package's folders
        for entry in sorted(folder.rglob("*.py")):
            if "__pycache__" not in entry.parts:
                archive.writestr(f"{top}/{entry.relative_to(folder).as_posix()}",
                                 entry.read_bytes())


def cache_path(db_name: str, name: str) -> str:
    """The path, on the origin, of the cached file ``name`` for the queue ``db_name``."""
    from urllib.parse import quote

    # The characters encodeURIComponent leaves as they are: the script finds the same path.
    return f"/__pyjobq-sw/{quote(db_name, safe=_URI_COMPONENT_SAFE)}/{name}"


def sync_tag(db_name: str) -> str:
    return SYNC_TAG_PREFIX + db_name


#: The script's tail: standalone, it takes over at once and starts pyjobq's part for itself.
_START = "// Standalone: take over at once"


def script(index: str, *, part: bool = False) -> str:
    """The Service Worker script, loading Pyodide from the folder ``index``; with ``part``,
    the module an app's own Service Worker imports (``pyjobqServiceWorker(self)`` left to it).

    Raises:
        ValueError: ``index`` is empty or holds a quote or a backslash (it is written into
            JavaScript string literals).
    """
    if not index or any(c in index for c in "\"'`\\\n"):
        raise ValueError(f"--index must be the URL of a Pyodide folder, got {index!r}")
    if not index.endswith("/"):
        index += "/"
    template = resources.files(__name__).joinpath("service_worker.mjs").read_text(
        encoding="utf-8")
    text = template.replace(_INDEX, index)
    if part:
        text = text[: text.index(_START)]
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyjobq.service_worker",
        description="Write pyjobq's Service Worker script (serve it on your origin, then "
                    "configure(service_worker=<its URL>)).")
    parser.add_argument("--index", default="/pyodide/",
                        help="the folder of the Pyodide distribution the Service Worker loads "
                             "(default: /pyodide/); the same as your pages' is best")
    parser.add_argument("--part", action="store_true",
                        help="write the part an app's own Service Worker imports "
                             "(import { pyjobqServiceWorker } ...; pyjobqServiceWorker(self))")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(script(args.index, part=args.part))
    except ValueError as exc:
        parser.error(str(exc))
    return 0

