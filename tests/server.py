"""Static file server plus a scriptable fake API for pyjobq's browser tests (stdlib only).

Usage: ``python tests/server.py --port 8123 --root build/site``

Static files come from ``--root`` with ``Cache-Control: no-store``. The fake API answers
every method (GET/POST/PUT/PATCH/DELETE) and logs each request (time, method, path,
status, ``X-Job-Id``, ``Idempotency-Key``, ``X-Sender``: which context sent it, as the
transport says):

- ``/api/echo...``      200 ``{"method","path","body","job_id"}`` (``/api/notes...`` too: the
                        README's examples)
- ``/api/status/NNN``   status NNN, ``{"code": "status_NNN", "error": {"code": "status_NNN"}}``
- ``/api/script/<key>`` next scripted response for key (the last one repeats); unknown key → echo
- ``/api/auth...``      401 ``{"code": "token_expired"}`` unless ``Authorization: Bearer <token>``
                        matches the current token (default ``t0``), else echo
- ``/api/slow?ms=N``    echo after N ms
- ``/api/chaos/<key>``  the chaos run's endpoint: 401 unless ``Authorization: Bearer <token>``
                        matches the current token, else at random (seeded by ``POST /__control/chaos
                        {"seed"}``) 200, 500, 429, a slow 200, or a token expiry (the token rotates
                        and this request gets 401); ``?fail=always`` answers 500 once past the
                        token. Logged with ``job_id`` = key and ``aborted`` when the client went
                        away before the answer (a crashed or closed tab).
- ``/api/token``        ``{"token": <current token>}``: the chaos transport's token refresh.
- ``/api/hold/<key>``   echo once ``POST /__control/release {"key"}`` has released key (at most
                        60 s); a released key stays released until reset.
                        ``GET /__control/holding`` lists the keys of requests blocked right now,
                        one entry per request.
- ``/__stalled/<path>`` the static file ``<path>``, but a ``.wasm`` file is held like
                        ``/api/hold/download`` (released by ``{"key": "download"}``): a
                        download that stalls, for ``configure(pyodide_url="/__stalled/pyodide/")``.

Each log entry also carries ``started`` (when the request arrived; ``time`` is when it
was answered).

Control: ``POST /__control/chaos {"seed", "weights", "slow_s": [low, high]}``,
``POST /__control/script {"key", "responses": [{"status", "body", "delay_ms"}]}``,
``POST /__control/token {"token"}``, ``POST /__control/release {"key"}`` (no key: every key held
now), ``GET /__control/holding``, ``GET|DELETE /__control/log``, ``POST /__control/reset``.
"""

from __future__ import annotations

import argparse
import json
import mimetypes
import posixpath
import random
import re
import select
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MIME = {
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".wasm": "application/wasm",
    ".json": "application/json",
    ".html": "text/html; charset=utf-8",
    ".whl": "application/octet-stream",
    ".zip": "application/zip",
    ".css": "text/css",
    ".map": "application/json",
    ".py": "text/x-python; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}

DEFAULT_TOKEN = "t0"
#: How often each answer of /api/chaos/<key> comes up (relative weights).
CHAOS_WEIGHTS = {"ok": 50, "error": 15, "throttled": 10, "slow": 15, "expire": 10}
#: How long a "slow" answer of /api/chaos/<key> takes, in seconds (drawn uniformly).
CHAOS_SLOW_S = (0.3, 1.5)


#: The prefix of static files served as a stalled download (``.wasm`` held until released).
STALLED = "/__stalled/"


class State:
    """Everything the control endpoints can change; one lock guards it all."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # an answer is logged as it is sent, maybe under the lock
        self.reset()

    def reset(self) -> None:
        # Let any request still blocked on a hold go, so no handler thread outlives a test.
        for event in getattr(self, "holds", {}).values():
            event.set()
        self.log: list[dict] = []
        self.scripts: dict[str, list[dict]] = {}
        self.token = DEFAULT_TOKEN
        self.holds: dict[str, threading.Event] = {}
        self.holding: list[str] = []
        self.chaos = random.Random(0)
        self.chaos_weights = dict(CHAOS_WEIGHTS)
        self.chaos_slow_s = CHAOS_SLOW_S
        self.token_serial = 0

    def hold_event(self, key: str) -> threading.Event:
        with self.lock:
            return self.holds.setdefault(key, threading.Event())

    def next_scripted(self, key: str) -> dict | None:
        with self.lock:
            queue = self.scripts.get(key)
            if not queue:
                return None
            # The last response sticks, so "fail twice then succeed" needs no padding.
            return queue.pop(0) if len(queue) > 1 else queue[0]


class StaticHandler(BaseHTTPRequestHandler):
    """Serves ``root`` with ``Cache-Control: no-store``; the JSON and logging plumbing of both
    this server and the demo's (scripts/demo_server.py subclasses it)."""

    protocol_version = "HTTP/1.1"
    root: Path
    quiet = True
    #: Serve every answer cross-origin isolated (COOP + COEP), so the pages and their workers
    #: read a 5 µs ``performance.now`` instead of a 100 µs one (``bench.mjs --trace/--profile``).
    isolated = False

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        if not self.quiet:
            sys.stderr.write("%s %s\n" % (self.address_string(), format % args))

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes, content_type: str, extra: dict | None = None) -> None:
        self._status = status
        if getattr(self, "_logging_api", False):
            # Logged before the answer leaves: a client that reads the log once answered finds
            # its request there (logged after, a fast client could read the log first).
            self._logging_api = False
            self._record(self.path, status, aborted=False, **self._log_extra)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Access-Control-Allow-Origin", "*")
        if self.isolated:
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._status = status

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _static(self, path: str) -> None:
        rel = posixpath.normpath(urllib.parse.unquote(path)).lstrip("/")
        target = (self.root / rel).resolve()
        if not target.is_relative_to(self.root):
            return self._json(403, {"code": "forbidden"})
        if target.is_dir():
            if not path.endswith("/"):
                # As http.server and static hosts do: the folder's index.html links relative
                # URLs, which resolve against the slash (JupyterLite opens /lite/notebooks?path=…).
                query = urllib.parse.urlsplit(self.path).query
                return self._send(301, b"", "text/plain",
                                  {"Location": path + "/" + ("?" + query if query else "")})
            target = target / "index.html"
        if not target.is_file():
            return self._send(404, b"not found\n", "text/plain")
        ctype = (MIME.get(target.suffix) or mimetypes.guess_type(target.name)[0]
                 or "application/octet-stream")
        self._send(200, target.read_bytes(), ctype)


class Handler(StaticHandler):
    server_version = "pyjobq-test/1"
    state: State

    # -- plumbing ---------------------------------------------------------------------
    def _record(self, path: str, status: int, **extra) -> None:
        entry = {
            "started": self._started,
            "time": time.time(),
            "method": self.command,
            "path": path,
            "status": status,
            "job_id": self.headers.get("X-Job-Id"),
            "idempotency_key": self.headers.get("Idempotency-Key"),
            "sender": self.headers.get("X-Sender"),
            **extra,
        }
        with self.state.lock:
            self.state.log.append(entry)

    def _client_gone(self) -> bool:
        """True once the client closed the connection (its tab crashed, closed or reloaded)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _chaos(self, key: str, body: bytes) -> None:
        st = self.state
        with st.lock:
            token = st.token
            outcome = st.chaos.choices(list(st.chaos_weights),
                                       weights=list(st.chaos_weights.values()))[0]
            delay = st.chaos.uniform(*st.chaos_slow_s)  # one draw whatever the bounds: same answers
            if outcome == "expire" and self.headers.get("Authorization") == f"Bearer {token}":
                st.token_serial += 1
                st.token = f"t{st.token_serial}"
        if self.headers.get("Authorization") != f"Bearer {token}" or outcome == "expire":
            return self._json(401, {"code": "token_expired"})
        if "fail=always" in self.path:  # a doomed job: every counted try fails
            return self._json(500, {"code": "status_500"})
        if outcome == "slow":
            # Sleep in small steps and notice a client that went away: the log's end time is
            # then when the run stopped, which is what "running in two places at once" compares.
            end = time.time() + delay
            while time.time() < end:
                if self._client_gone():
                    self._status = 0
                    self._aborted = True
                    return
                time.sleep(0.005)
        if outcome == "error":
            return self._json(500, {"code": "status_500"})
        if outcome == "throttled":
            return self._json(429, {"code": "status_429"})
        return self._echo(self.path, body)

    # -- dispatch ---------------------------------------------------------------------
    def _handle(self) -> None:
        self._status = 0
        self._started = time.time()
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        body = self._read_body()
        try:
            if path.startswith("/__control/"):
                self._control(path, body)
            elif path.startswith("/api/"):
                self._aborted = False
                chaos = re.fullmatch(r"/api/chaos/([^/]+)", path)
                self._log_extra = {"job_id": urllib.parse.unquote(chaos.group(1))} if chaos else {}
                self._logging_api = True
                try:
                    self._api(path, urllib.parse.parse_qs(url.query), body)
                finally:
                    # Logged even when no answer was written (the client went away).
                    if self._logging_api:
                        self._logging_api = False
                        self._record(self.path, self._status, aborted=self._aborted,
                                     **self._log_extra)
            elif path.startswith(STALLED):
                self._stalled(path.removeprefix(STALLED.rstrip("/")))
            elif self.command in ("GET", "HEAD"):
                self._static(path)
            else:
                self._json(405, {"code": "method_not_allowed"})
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    def do_OPTIONS(self) -> None:
        self._read_body()
        self._send(
            204,
            b"",
            "text/plain",
            {
                "Access-Control-Allow-Methods": "GET, POST, PUT, PATCH, DELETE, OPTIONS",
                "Access-Control-Allow-Headers":
                    self.headers.get("Access-Control-Request-Headers", "*"),
            },
        )

    def _hold(self, key: str) -> None:
        """Block until ``key`` is released (at most 60 s), listed in ``holding`` meanwhile."""
        event = self.state.hold_event(key)
        with self.state.lock:
            self.state.holding.append(key)
        try:
            event.wait(60)
        finally:
            with self.state.lock:
                if key in self.state.holding:
                    self.state.holding.remove(key)

    def _stalled(self, path: str) -> None:
        if path.endswith(".wasm"):
            self._hold("download")
        self._static(path)

    def _echo(self, path: str, body: bytes, status: int = 200) -> None:
        text = body.decode("utf-8", "replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        self._json(
            status,
            {"method": self.command, "path": path, "body": parsed,
             "job_id": self.headers.get("X-Job-Id")},
        )

    def _api(self, path: str, query: dict, body: bytes) -> None:
        full = self.path
        if m := re.fullmatch(r"/api/chaos/([^/]+)", path):
            return self._chaos(urllib.parse.unquote(m.group(1)), body)
        if path == "/api/token":
            with self.state.lock:
                return self._json(200, {"token": self.state.token})
        if path.startswith(("/api/echo", "/api/notes")):
            return self._echo(full, body)
        if m := re.fullmatch(r"/api/status/(\d{3})", path):
            code = int(m.group(1))
            name = f"status_{code}"
            return self._json(code, {"code": name, "error": {"code": name}})
        if m := re.fullmatch(r"/api/script/([^/]+)", path):
            resp = self.state.next_scripted(urllib.parse.unquote(m.group(1)))
            if resp is None:
                return self._echo(full, body)
            if resp.get("delay_ms"):
                time.sleep(resp["delay_ms"] / 1000)
            return self._json(int(resp.get("status", 200)), resp.get("body", {}))
        if path.startswith("/api/auth"):
            with self.state.lock:
                token = self.state.token
            if self.headers.get("Authorization") != f"Bearer {token}":
                return self._json(401, {"code": "token_expired"})
            return self._echo(full, body)
        if m := re.fullmatch(r"/api/hold/([^/]+)", path):
            self._hold(urllib.parse.unquote(m.group(1)))
            return self._echo(full, body)
        if path == "/api/slow":
            ms = int((query.get("ms") or ["0"])[0])
            time.sleep(ms / 1000)
            return self._echo(full, body)
        return self._json(404, {"code": "status_404", "error": {"code": "status_404"}})

    def _control(self, path: str, body: bytes) -> None:
        st = self.state
        data = json.loads(body) if body else {}
        if path == "/__control/log":
            if self.command == "DELETE":
                with st.lock:
                    st.log.clear()
                return self._json(200, {"ok": True})
            with st.lock:
                return self._json(200, list(st.log))
        if path == "/__control/reset" and self.command == "POST":
            with st.lock:
                st.reset()
            return self._json(200, {"ok": True})
        if path == "/__control/script" and self.command == "POST":
            with st.lock:
                st.scripts[str(data["key"])] = list(data.get("responses") or [])
            return self._json(200, {"ok": True})
        if path == "/__control/release" and self.command == "POST":
            if "key" in data:
                keys = [str(data["key"])]
            else:
                with st.lock:
                    keys = list(st.holding)
            for key in keys:
                st.hold_event(key).set()
            return self._json(200, {"ok": True, "released": keys})
        if path == "/__control/holding" and self.command == "GET":
            with st.lock:
                return self._json(200, list(st.holding))
        if path == "/__control/chaos" and self.command == "POST":
            with st.lock:
                st.chaos = random.Random(data.get("seed", 0))
                st.chaos_weights = {**CHAOS_WEIGHTS, **(data.get("weights") or {})}
                low, high = data.get("slow_s") or CHAOS_SLOW_S
                st.chaos_slow_s = (float(low), float(high))
            return self._json(200, {"ok": True})
        if path == "/__control/token" and self.command == "POST":
            with st.lock:
                st.token = str(data["token"])
            return self._json(200, {"ok": True})
        return self._json(404, {"code": "unknown_control"})


def bind(handler: type[StaticHandler], port: int, host: str = "127.0.0.1",
         **attrs) -> ThreadingHTTPServer:
    """A threading server on ``host:port`` (0: a free port) whose handler is ``handler`` with
    ``attrs`` set on a subclass, so each server keeps its own state."""
    server = ThreadingHTTPServer((host, port), type("Bound" + handler.__name__, (handler,), attrs))
    server.daemon_threads = True
    return server


def arguments(description: str, port: int) -> argparse.ArgumentParser:
    """The command line both servers take: ``--port``, ``--host``, ``--root``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--port", type=int, default=port)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--root", type=Path, default=Path("build/site"))
    return ap


def serve(server: ThreadingHTTPServer, banner: str) -> int:
    """Print ``banner`` (``{base}`` is the server's URL), serve until Ctrl-C, close."""
    host, port = server.server_address[:2]
    print(banner.format(base=f"http://{host}:{port}"), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def make_server(port: int, root: Path, quiet: bool = True,
                host: str = "127.0.0.1", isolated: bool = False) -> ThreadingHTTPServer:
    return bind(Handler, port, host, root=root.resolve(), state=State(), quiet=quiet,
                isolated=isolated)


def main() -> int:
    ap = arguments("pyjobq test server", 8123)
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    ap.add_argument("--isolated", action="store_true",
                    help="serve cross-origin isolated (COOP + COEP): a 5 µs performance.now")
    args = ap.parse_args()
    return serve(make_server(args.port, args.root, quiet=not args.verbose, host=args.host,
                             isolated=args.isolated),
                 "listening on {base}")


if __name__ == "__main__":
    sys.exit(main())
