"""``python -m pyjobq.browser.worker_script`` writes the worker script pages run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_command_writes_the_worker_script_of_this_pyjobq() -> None:
    written = subprocess.run([sys.executable, "-m", "pyjobq.browser.worker_script"],
                             check=True, capture_output=True, text=True, cwd=ROOT).stdout
    assert written == (ROOT / "pyjobq" / "browser" / "worker.mjs").read_text(encoding="utf-8")
    # The preload line's parts are in the script it writes.
    assert '"preload" in params' in written and "worker_attached" in written
