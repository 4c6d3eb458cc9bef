"""A site for browser tests: a folder served over HTTP with the headers Pyodide needs, or the
address of a server you run yourself.

Pyodide and pyjobq's scheduler worker load as ES modules and WebAssembly, which a browser
accepts only with the right ``Content-Type`` (``text/javascript`` for ``.mjs``,
``application/wasm`` for ``.wasm``, streamed compilation refuses anything else). Every answer
also says ``Cache-Control: no-store``, so a test sees the files as they are now, and
``Access-Control-Allow-Origin: *``, so a worker or a page of another origin may read them.
Standard library only: it runs wherever pytest does.
"""

from __future__ import annotations

import mimetypes
import os
import posixpath
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: The types a Pyodide site serves, whatever the machine's ``mimetypes`` tables say.
CONTENT_TYPES = {
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".cjs": "text/javascript",
    ".wasm": "application/wasm",
    ".json": "application/json",
    ".html": "text/html; charset=utf-8",
    ".whl": "application/octet-stream",
    ".zip": "application/zip",
    ".tar": "application/x-tar",
    ".css": "text/css",
    ".map": "application/json",
    ".py": "text/x-python; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".toml": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

#: Sent with every file.
HEADERS = {"Cache-Control": "no-store", "Access-Control-Allow-Origin": "*"}


@dataclass(frozen=True)
class Site:
    """Where the pages under test are: ``base`` is an ``http(s)://`` address ending in ``/``.

    ``site.url("app.html")`` is that page's address; ``folder`` is the folder being served,
    or ``None`` for a server of your own."""

    base: str
    folder: Path | None = None

    def url(self, path: str = "") -> str:
        """The address of ``path`` on the site (relative to its base; a leading ``/`` is
        dropped, so a site served under a sub-path stays under it)."""
        return urllib.parse.urljoin(self.base, path.lstrip("/"))


def site_at(address: str) -> Site:
    """A site someone else serves, at ``address`` (``http://`` or ``https://``).

    Raises:
        ValueError: ``address`` is not an http(s) URL.
    """
    parts = urllib.parse.urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"pyjobq site: {address!r} is not an http:// or https:// address; "
                         "give the address of your server or a folder to serve")
    return Site(address if address.endswith("/") else address + "/")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root: Path
    extra: Mapping[str, str]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib's name
        pass  # a test's output is for the test; a failing request shows in the browser

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        path = urllib.parse.urlsplit(self.path).path
        # As http.server does: the path is normalised without resolving links, so a symlinked
        # folder inside the site is served (its files are the site's), and no `..` leaves it.
        words = [word for word in posixpath.normpath(urllib.parse.unquote(path)).split("/")
                 if word and word not in (".", "..")]
        if any("\0" in word or os.sep in word or (os.altsep and os.altsep in word)
               for word in words):
            return self._send(400, b"bad path\n", "text/plain; charset=utf-8", body)
        target = self.root.joinpath(*words)
        if not os.path.normpath(target).startswith(str(self.root)):
            return self._send(403, b"outside the site\n", "text/plain; charset=utf-8", body)
        try:
            if target.is_dir():
                if not path.endswith("/"):
                    # As static hosts do: a folder's index.html links relative to the slash.
                    query = urllib.parse.urlsplit(self.path).query
                    location = path + "/" + ("?" + query if query else "")
                    return self._send(301, b"", "text/plain", body, {"Location": location})
                target = target / "index.html"
            data = target.read_bytes() if target.is_file() else None
        except (OSError, ValueError):
            data = None  # a name too long for the file system, a file unreadable: not here
        if data is None:
            return self._send(404, b"not found\n", "text/plain; charset=utf-8", body)
        ctype = (CONTENT_TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0]
                 or "application/octet-stream")
        self._send(200, data, ctype, body)

    def _send(self, status: int, data: bytes, ctype: str, body: bool,
              extra: Mapping[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for name, value in {**HEADERS, **self.extra, **(extra or {})}.items():
                self.send_header(name, value)
            self.end_headers()
            if body:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the tab went away (closed, crashed) before its answer


class _Server(ThreadingHTTPServer):
    # A page and its workers ask for many files at once (Pyodide's, the app's): a deep listen
    # queue, not socketserver's 5, so none is refused while the others are answered.
    request_queue_size = 64
    daemon_threads = True


@contextmanager
def serve_folder(folder: str | Path, *, host: str = "127.0.0.1", port: int = 0,
                 headers: Mapping[str, str] | None = None) -> Iterator[Site]:
    """Serve ``folder`` over HTTP for the ``with`` block; yields its :class:`Site`.

    Links inside the folder are followed, as ``python -m http.server`` follows them (a
    symlinked ``pyodide/`` is served); a path with ``..`` never leaves the folder. ``port=0``
    takes a free port. ``headers`` are sent with every file besides the defaults
    (e.g. ``{"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy":
    "require-corp"}`` for a page that needs ``crossOriginIsolated``).

    Raises:
        FileNotFoundError: ``folder`` is not a folder.
    """
    root = Path(folder).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"pyjobq site: {folder} is not a folder; give the folder that "
                                "holds your pages (and Pyodide, if you serve it yourself)")
    handler = type("SiteHandler", (_Handler,), {"root": root, "extra": dict(headers or {})})
    server = _Server((host, port), handler)
    thread = threading.Thread(target=server.serve_forever, name="pyjobq-site", daemon=True)
    thread.start()
    try:
        bound_host, bound_port = server.server_address[:2]
        yield Site(f"http://{bound_host!s}:{bound_port}/", root)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
