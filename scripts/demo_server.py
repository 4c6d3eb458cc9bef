"""The demo's server: build/site plus a small notes API that can be told to misbehave (stdlib only).

Usage: ``python scripts/demo_server.py [--port 8000] [--root build/site]``

API (JSON):

- ``PUT /api/notes/<id> {"text"}``      save a note; needs ``Authorization: Bearer <token>``
- ``GET /api/notes/<id>``               the saved note
- ``POST /api/notes/<id>/publish``      publish it; 403 ``{"code": "read_only"}`` while
                                        ``forbid`` is on
- ``POST /api/auth/refresh``            a new token ``{"token"}``; the old one stops working

Every ``/api/notes`` request first passes the current mode: 401 ``{"code": "token_expired"}``
for a stale token, ``delay_ms`` of latency, a 500 ``{"code": "server_error"}`` with
probability ``fail_rate``. Query parameters ``?status=NNN`` and ``?delay_ms=N`` override
both for one request.

Control: ``GET /__demo/state`` (mode, token, notes, the last 200 requests),
``POST /__demo/mode {"fail_rate", "delay_ms", "forbid"}`` (omitted fields keep their value),
``POST /__demo/expire`` (the current token now gets 401 until a refresh), ``POST /__demo/reset``.
"""

from __future__ import annotations

import json
import random
import re
import secrets
import sys
import threading
import time
import urllib.parse
from http.server import ThreadingHTTPServer
from pathlib import Path

# The static half (files, no-store, JSON replies, the command line) is the test server's.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from server import StaticHandler, arguments, bind, serve  # noqa: E402


class Demo:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.token = "demo-" + secrets.token_hex(4)
        self.fail_rate = 0.0
        self.delay_ms = 0
        self.forbid = True
        self.notes: dict[str, dict] = {}
        self.log: list[dict] = []

    def state(self) -> dict:
        return {"token": self.token, "fail_rate": self.fail_rate, "delay_ms": self.delay_ms,
                "forbid": self.forbid, "notes": self.notes, "log": self.log[-200:]}


class Handler(StaticHandler):
    server_version = "pyjobq-demo/1"
    demo: Demo

    def _handle(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        raw = self._read_body()
        try:
            if url.path.startswith("/__demo/"):
                self._control(url.path, raw)
            elif url.path.startswith("/api/"):
                status = self._api(url.path, urllib.parse.parse_qs(url.query), raw)
                with self.demo.lock:
                    self.demo.log.append({"time": time.time(), "method": self.command,
                                          "path": url.path, "status": status})
            elif self.command in ("GET", "HEAD"):
                self._static(url.path)
            else:
                self._json(405, {"code": "method_not_allowed"})
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    def _api(self, path: str, query: dict, raw: bytes) -> int:
        d = self.demo
        if path == "/api/auth/refresh" and self.command == "POST":
            with d.lock:
                d.token = "demo-" + secrets.token_hex(4)
                token = d.token
            self._json(200, {"token": token})
            return 200
        with d.lock:
            token, fail_rate, delay_ms, forbid = d.token, d.fail_rate, d.delay_ms, d.forbid
        delay_ms = int((query.get("delay_ms") or [delay_ms])[0])
        if delay_ms:
            time.sleep(min(delay_ms, 120_000) / 1000)
        if forced := (query.get("status") or [None])[0]:
            status = int(forced)
            self._json(status, {"code": f"status_{status}"})
            return status
        if self.headers.get("Authorization") != f"Bearer {token}":
            self._json(401, {"code": "token_expired"})
            return 401
        if random.random() < fail_rate:
            self._json(500, {"code": "server_error"})
            return 500
        if m := re.fullmatch(r"/api/notes/([\w-]+)/publish", path):
            if forbid:
                self._json(403, {"code": "read_only", "message": "this account may not publish"})
                return 403
            self._json(200, {"id": m.group(1), "published": True})
            return 200
        if m := re.fullmatch(r"/api/notes/([\w-]+)", path):
            note_id = m.group(1)
            if self.command == "GET":
                with d.lock:
                    note = d.notes.get(note_id)
                self._json(200 if note else 404, note or {"code": "not_found"})
                return 200 if note else 404
            if self.command == "PUT":
                try:
                    text = str(json.loads(raw or b"{}").get("text", ""))
                except (ValueError, AttributeError):
                    self._json(422, {"code": "bad_body"})
                    return 422
                with d.lock:
                    version = d.notes.get(note_id, {}).get("version", 0) + 1
                    d.notes[note_id] = {"id": note_id, "text": text, "version": version,
                                        "saved_at": time.time()}
                    note = d.notes[note_id]
                self._json(200, note)
                return 200
        self._json(404, {"code": "not_found"})
        return 404

    def _control(self, path: str, raw: bytes) -> None:
        d = self.demo
        data = json.loads(raw) if raw else {}
        with d.lock:
            if path == "/__demo/state":
                return self._json(200, d.state())
            if path == "/__demo/reset" and self.command == "POST":
                d.reset()
                return self._json(200, d.state())
            if path == "/__demo/expire" and self.command == "POST":
                # nobody holds this one: 401 until a refresh
                d.token = "demo-" + secrets.token_hex(4)
                return self._json(200, {"ok": True})
            if path == "/__demo/mode" and self.command == "POST":
                if "fail_rate" in data:
                    d.fail_rate = min(1.0, max(0.0, float(data["fail_rate"])))
                if "delay_ms" in data:
                    d.delay_ms = max(0, int(data["delay_ms"]))
                if "forbid" in data:
                    d.forbid = bool(data["forbid"])
                return self._json(200, d.state())
        self._json(404, {"code": "unknown_control"})


def make_server(port: int, root: Path, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    return bind(Handler, port, host, root=root.resolve(), demo=Demo())


def main() -> int:
    args = arguments("pyjobq demo server", 8000).parse_args()
    return serve(make_server(args.port, args.root, args.host), "demo server on {base}/demo/")


if __name__ == "__main__":
    sys.exit(main())
