"""The cross-tab kits in another engine than Chromium: the helpers that speak Chromium's
DevTools protocol (a crash, a freeze) refuse at once, naming the engine and what to do instead,
before any CDP call. A stand-in context says which engine it is, as Playwright's does
(``context.browser.browser_type.name``); the three-engine suite (tests/engines) is the real
check of the helpers that need only the page."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from pyjobq.testing import PLAYWRIGHT_HELPER
from pyjobq.testing.playwright import Tab, TabError


class StandInContext:
    """A context of ``engine`` whose CDP session must never be asked for."""

    def __init__(self, engine: str) -> None:
        self.browser = SimpleNamespace(browser_type=SimpleNamespace(name=engine))
        self.cdp_asked = 0

    def new_cdp_session(self, page: Any) -> Any:
        self.cdp_asked += 1
        raise AssertionError("no CDP session in this engine")


class StandInPage:
    url = "http://127.0.0.1/app"

    def on(self, event: str, callback: Any) -> None:
        pass

    def evaluate(self, *args: Any, **kw: Any) -> Any:
        return None


@pytest.mark.parametrize("engine", ["firefox", "webkit"])
@pytest.mark.parametrize("call", ["crash", "freeze"])
def test_a_cdp_helper_in_another_engine_names_the_engine_and_the_way_out(
        engine: str, call: str) -> None:
    context = StandInContext(engine)
    tab = Tab(context, StandInPage())  # type: ignore[arg-type]
    with pytest.raises(TabError) as caught:
        getattr(tab, call)()
    message = str(caught.value)
    assert f"runs in {engine}" in message and "Chromium project" in message, message
    assert "close the tab" in message
    assert context.cdp_asked == 0


def _js(call: str, engine: str) -> str:
    script = f"""
const kit = require({json.dumps(str(PLAYWRIGHT_HELPER))});
let asked = 0;
const browserType = {{ name: () => {json.dumps(engine)} }};
const context = {{ browser: () => ({{ browserType: () => browserType }}),
                  newCDPSession: async () => {{ asked++; throw new Error("no CDP here"); }} }};
const page = {{ evaluate: async () => null, waitForEvent: async () => null }};
kit.{call}(context, page).then(() => console.log(JSON.stringify({{ok: true, asked}})),
  (e) => console.log(JSON.stringify({{ok: false, message: e.message, asked}})));
"""
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60,
                         check=True)
    return out.stdout


@pytest.mark.parametrize("engine", ["firefox", "webkit"])
@pytest.mark.parametrize("call", ["crashTab", "freezeTab"])
def test_the_javascript_kit_refuses_the_same_way(engine: str, call: str) -> None:
    answer = json.loads(_js(call, engine))
    assert answer["ok"] is False
    assert f"runs in {engine}" in answer["message"] and "Chromium project" in answer["message"]
    assert answer["asked"] == 0
