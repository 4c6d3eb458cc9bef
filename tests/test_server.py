"""The test server's fake API behaves as the browser tests expect (CPython, no browser)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from server import make_server  # tests/ is on sys.path (rootdir-relative conftest)


@pytest.fixture
def base(tmp_path: Path):
    (tmp_path / "a.mjs").write_text("export default 1;")
    (tmp_path / "b.wasm").write_bytes(b"\0asm")
    server = make_server(0, tmp_path)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def call(url: str, method: str = "GET", body=None, headers: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_static_mime_types_and_no_store(base):
    status, headers, body = call(base + "/a.mjs")
    assert (status, headers["Content-Type"], headers["Cache-Control"]) == (
        200, "text/javascript", "no-store")
    assert call(base + "/b.wasm")[1]["Content-Type"] == "application/wasm"
    assert call(base + "/missing.js")[0] == 404
    assert call(base + "/../etc/passwd")[0] in (403, 404)


def test_folder_without_slash_redirects_keeping_the_query(base, tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "index.html").write_text("<p>app</p>")
    opener = urllib.request.build_opener(type("NoRedirect", (urllib.request.HTTPRedirectHandler,), {
        "redirect_request": lambda self, *args: None}))
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(base + "/app?path=a.ipynb")
    assert (err.value.code, err.value.headers["Location"]) == (301, "/app/?path=a.ipynb")
    assert call(base + "/app/")[2] == b"<p>app</p>"


def test_echo_and_log(base):
    status, _, body = call(base + "/api/echo/x?y=1", "PATCH", {"a": 1}, {"X-Job-Id": "j1"})
    assert status == 200
    assert json.loads(body) == {"method": "PATCH", "path": "/api/echo/x?y=1", "body": {"a": 1},
                                "job_id": "j1"}
    log = json.loads(call(base + "/__control/log")[2])
    assert [(e["method"], e["path"], e["status"], e["job_id"]) for e in log] == [
        ("PATCH", "/api/echo/x?y=1", 200, "j1")
    ]
    call(base + "/__control/log", "DELETE")
    assert json.loads(call(base + "/__control/log")[2]) == []


def test_status(base):
    status, _, body = call(base + "/api/status/422", "POST", {})
    assert status == 422
    assert json.loads(body) == {"code": "status_422", "error": {"code": "status_422"}}


def test_script_pops_then_repeats_last(base):
    call(base + "/__control/script", "POST", {"key": "k", "responses": [
        {"status": 500, "body": {"n": 1}}, {"status": 201, "body": {"n": 2}, "delay_ms": 1},
    ]})
    assert [call(base + "/api/script/k", "POST", {})[0] for _ in range(3)] == [500, 201, 201]
    status, _, body = call(base + "/api/script/other", "PUT", {"z": 0})
    assert status == 200 and json.loads(body)["body"] == {"z": 0}


def test_auth_token(base):
    assert call(base + "/api/auth/me")[0] == 401
    assert json.loads(call(base + "/api/auth/me")[2]) == {"code": "token_expired"}
    assert call(base + "/api/auth/me", headers={"Authorization": "Bearer t0"})[0] == 200
    call(base + "/__control/token", "POST", {"token": "t1"})
    assert call(base + "/api/auth/me", headers={"Authorization": "Bearer t0"})[0] == 401
    assert call(base + "/api/auth/me", headers={"Authorization": "Bearer t1"})[0] == 200
    call(base + "/__control/reset", "POST", {})
    assert call(base + "/api/auth/me", headers={"Authorization": "Bearer t0"})[0] == 200


def test_slow(base):
    status, _, body = call(base + "/api/slow?ms=20", "DELETE")
    assert status == 200 and json.loads(body)["method"] == "DELETE"


def test_hold_blocks_until_released(base):
    results: dict[str, int] = {}

    def hit(name: str, key: str) -> None:
        results[name] = call(base + f"/api/hold/{key}", "POST", {"n": name})[0]

    threads = [threading.Thread(target=hit, args=(n, k)) for n, k in (("a", "k1"), ("b", "k2"))]
    for t in threads:
        t.start()
    for _ in range(200):
        if sorted(json.loads(call(base + "/__control/holding")[2])) == ["k1", "k2"]:
            break
        threading.Event().wait(0.01)
    assert sorted(json.loads(call(base + "/__control/holding")[2])) == ["k1", "k2"]
    assert results == {}
    released = json.loads(call(base + "/__control/release", "POST", {"key": "k1"})[2])
    assert released["released"] == ["k1"]
    threads[0].join(5)
    assert results == {"a": 200}
    assert json.loads(call(base + "/__control/holding")[2]) == ["k2"]
    # A released key stays released; releasing without a key lets every held request go.
    assert call(base + "/api/hold/k1")[0] == 200
    call(base + "/__control/release", "POST", {})
    threads[1].join(5)
    assert results == {"a": 200, "b": 200}
    log = json.loads(call(base + "/__control/log")[2])
    assert [e["path"] for e in log] == ["/api/hold/k1", "/api/hold/k1", "/api/hold/k2"]
    assert all(e["started"] <= e["time"] for e in log)
    assert log[2]["time"] - log[2]["started"] > 0  # k2 was held across the release of k1


# The slow answers' delay, scaled down from the default 0.3-1.5 s: the same seed draws the same
# answers whatever the bounds (one draw each), so this checks what the e2e chaos run gets, fast.
SLOW_S = [0.02, 0.05]


def test_chaos_answers_at_random_logs_the_key_and_expires_the_token(base):
    call(base + "/__control/chaos", "POST", {"seed": 7, "slow_s": SLOW_S})
    token = json.loads(call(base + "/api/token")[2])["token"]
    assert call(base + "/api/chaos/k0", "POST", {"a": 1})[0] == 401  # no token: 401
    statuses = []
    for i in range(60):
        status = call(base + f"/api/chaos/k{i}", "POST", {"i": i},
                      {"Authorization": f"Bearer {token}"})[0]
        if status == 401:  # an expiry: refresh, as the chaos transport does
            token = json.loads(call(base + "/api/token")[2])["token"]
        statuses.append(status)
    assert {200, 401, 429, 500} <= set(statuses)
    # The server logs a request as its answer goes out (its end time is then); wait for all 61,
    # boundedly, all the same.
    deadline = time.monotonic() + 5
    while True:
        log = [e for e in json.loads(call(base + "/__control/log")[2])
               if e["path"].startswith("/api/chaos/")]
        if len(log) >= 61 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    # In the order the requests came (an entry is appended as its answer goes out, so a quick
    # answer can be logged before the slow one before it finished being logged).
    log.sort(key=lambda e: e["started"])
    assert [e["job_id"] for e in log[1:]] == [f"k{i}" for i in range(60)]
    assert all(e["started"] <= e["time"] and e["aborted"] is False for e in log)
    slow = [e for e in log if e["time"] - e["started"] >= SLOW_S[0]]
    # they slept, within bounds
    assert slow and all(e["time"] - e["started"] < SLOW_S[1] + 1 for e in slow)
    # The same seed gives the same answers.
    call(base + "/__control/reset", "POST", {})
    call(base + "/__control/chaos", "POST", {"seed": 7, "slow_s": SLOW_S})
    token = json.loads(call(base + "/api/token")[2])["token"]
    call(base + "/api/chaos/k0", "POST", {"a": 1})
    again = []
    for i in range(60):
        status = call(base + f"/api/chaos/k{i}", "POST", {"i": i},
                      {"Authorization": f"Bearer {token}"})[0]
        if status == 401:
            token = json.loads(call(base + "/api/token")[2])["token"]
        again.append(status)
    assert again == statuses


def test_a_stalled_download_holds_wasm_until_released_and_serves_the_rest(base):
    assert call(base + "/__stalled/a.mjs")[2] == b"export default 1;"
    got: dict[str, bytes] = {}
    thread = threading.Thread(target=lambda: got.update(wasm=call(base + "/__stalled/b.wasm")[2]))
    thread.start()
    for _ in range(200):
        if json.loads(call(base + "/__control/holding")[2]) == ["download"]:
            break
        time.sleep(0.01)
    assert json.loads(call(base + "/__control/holding")[2]) == ["download"]
    assert got == {}
    call(base + "/__control/release", "POST", {"key": "download"})
    thread.join(5)
    assert got == {"wasm": b"\0asm"}
