"""The notes demo: every save goes through pyjobq, debounced in the queue (spec: "Debouncing a
save").

Each change deletes the save it replaces (delete_group) and files a new one with
delay_ms, so the latest text is stored the moment it is typed and sent once the
typing pauses — from whichever tab holds the queue's lock, even after this one
closes. The transport reads the token on every replay and, on a 401, refreshes it.
"""

import asyncio
import json

import js
from pyodide.ffi import create_proxy
from pyodide.http import pyfetch

import pyjobq

TOKEN_KEY = "pyjobq-demo-token"
NOTE_ID = "welcome"
GROUP = f"note:{NOTE_ID}"
SAVE_DELAY_MS = 800

doc = js.document


def el(element_id):
    return doc.getElementById(element_id)


# ---------------------------------------------------------------- session & transport

def current_token():
    # localStorage, so a refresh in one tab is what every tab sends next.
    return js.localStorage.getItem(TOKEN_KEY)


def show_token():
    el("token").textContent = current_token() or "—"


_refreshing = None


async def refresh_token():
    """Get a new token; concurrent callers in this tab share one request."""
    global _refreshing
    if _refreshing is None:
        async def go():
            response = await pyfetch("/api/auth/refresh", method="POST")
            token = (await response.json())["token"]
            js.localStorage.setItem(TOKEN_KEY, token)
            show_token()
            return token

        def finished(_task):
            global _refreshing
            _refreshing = None

        _refreshing = asyncio.ensure_future(go())
        _refreshing.add_done_callback(finished)
    return await asyncio.shield(_refreshing)


async def _fetch(method, path, body, token):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    kwargs = {} if body is None else {"body": json.dumps(body)}
    return await pyfetch(path, method=method, headers=headers, **kwargs)


async def send(method, path, body):
    """The queue's transport: returns the unread response, whatever its status."""
    token = current_token()  # read on every replay, never captured
    response = await _fetch(method, path, body, token)
    if response.status == 401 and el("auto").checked:
        if current_token() == token:  # nobody refreshed since we read it
            await refresh_token()
        response = await _fetch(method, path, body, current_token())
    return response


pyjobq.configure(db_name="pyjobq-demo", lock_name="pyjobq-demo-processor",
                 channel_name="pyjobq-demo", transport=send)

from pyjobq import queue, ui  # noqa: E402 - the queue reads its names on import

# ---------------------------------------------------------------- the note

_latest = None
_saver = None


async def _save_loop():
    global _latest
    # Keystrokes that arrive while a save is being filed coalesce into the next one.
    while _latest is not None:
        text, _latest = _latest, None
        await queue.delete_group(GROUP)
        job = queue.enqueue_fetch("PUT", f"/api/notes/{NOTE_ID}", {"text": text}, type="notes",
                                  group=GROUP, label="save note", delay_ms=SAVE_DELAY_MS)
        await job.stored


def save(text):
    global _latest, _saver
    _latest = text
    el("saved").textContent = "Unsaved changes…"
    if _saver is None or _saver.done():
        _saver = asyncio.ensure_future(_save_loop())


def on_update(update):
    if update.get("label") == "save note" and update.get("status") == "done":
        result = update.get("result") or {}
        el("saved").textContent = f"Saved · version {result.get('version', '?')}"
    elif update.get("label") == "save note" and update.get("http_status") == 401:
        el("saved").textContent = "Waiting for a fresh token (401)…"


async def load_note():
    response = await send("GET", f"/api/notes/{NOTE_ID}", None)
    if response.ok:
        el("note").value = (await response.json())["text"]


# ---------------------------------------------------------------- other work

def publish():
    queue.enqueue_fetch("POST", f"/api/notes/{NOTE_ID}/publish", {}, type="publish",
                        label="publish note")


async def render_thumbnail(*_signal):
    """A volatile job: a closure in this tab's memory, reporting its progress."""
    report = getattr(queue, "report_progress", None)
    for step in range(1, 11):
        await asyncio.sleep(0.3)
        if report is not None:
            report(step / 10)
    return {"width": 160, "height": 90}


def thumbnail():
    queue.enqueue(render_thumbnail, type="thumbnail", label="render thumbnail")


async def set_mode(**mode):
    response = await pyfetch("/__demo/mode", method="POST", body=json.dumps(mode))
    state = await response.json()
    flaky, slow, forbid = state["fail_rate"] > 0, state["delay_ms"] > 0, state["forbid"]
    el("flaky").textContent = f"Random 500s: {'on (50%)' if flaky else 'off'}"
    el("flaky").setAttribute("aria-pressed", str(flaky).lower())
    el("slow").textContent = f"Slow server (3 s): {'on' if slow else 'off'}"
    el("slow").setAttribute("aria-pressed", str(slow).lower())
    el("forbid").textContent = f"Publishing allowed: {'no (403)' if forbid else 'yes'}"
    el("forbid").setAttribute("aria-pressed", str(forbid).lower())


async def expire_token():
    await pyfetch("/__demo/expire", method="POST")


async def refresh_and_resave():
    await refresh_token()
    # A save parked on the 401 branch waits 60 s; file it again now that the token works.
    if any(r.get("group") == GROUP and r["status"] == "pending" for r in await queue.query_all()):
        save(el("note").value)


# ---------------------------------------------------------------- wiring

_listeners = []  # (element, event, proxy): removed and destroyed on pagehide


def listen(element, event, handler):
    proxy = create_proxy(handler)
    element.addEventListener(event, proxy)
    _listeners.append((element, event, proxy))


def spawn(make):
    return lambda _event: asyncio.ensure_future(make())


def close(_event):
    for element, event, proxy in _listeners:
        element.removeEventListener(event, proxy)
        proxy.destroy()
    _listeners.clear()
    ui.uninstall()


async def main():
    if not current_token():
        await refresh_token()
    show_token()
    queue.on_update(on_update)
    await ui.install()
    await load_note()
    await set_mode()
    listen(el("note"), "input", lambda _e: save(el("note").value))
    listen(el("publish"), "click", lambda _e: publish())
    listen(el("refresh"), "click", spawn(refresh_and_resave))
    listen(el("expire"), "click", spawn(expire_token))
    listen(el("flaky"), "click",
           spawn(lambda: set_mode(
               fail_rate=0 if el("flaky").getAttribute("aria-pressed") == "true" else 0.5)))
    listen(el("slow"), "click",
           spawn(lambda: set_mode(
               delay_ms=0 if el("slow").getAttribute("aria-pressed") == "true" else 3000)))
    listen(el("forbid"), "click",
           spawn(lambda: set_mode(forbid=el("forbid").getAttribute("aria-pressed") != "true")))
    listen(js.window, "pagehide", close)
    if hasattr(queue, "enqueue"):
        listen(el("thumb"), "click", lambda _e: thumbnail())
        el("thumb").disabled = False
    else:
        el("thumb").title = "Volatile jobs need queue.enqueue, which this pyjobq does not have yet"
    for name in ("note", "publish", "refresh", "auto", "expire", "flaky", "slow", "forbid"):
        el(name).disabled = False
    el("note").placeholder = "Write something…"
    el("boot").hidden = True
    js.window.demoReady = True


await main()
