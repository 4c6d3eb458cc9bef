"""Run many seeds of the multi-tab simulation (tests/test_simulation.py) and print the figures.

    make soak                      # 20,000 seeds
    SOAK_SEEDS=5000 make soak      # or any number
    SOAK_START=1000 make soak      # seeds SOAK_START .. SOAK_START + SOAK_SEEDS - 1

CI runs 1,000 seeds (``pytest tests/test_simulation.py``); this is the long run, a command
rather than a test. Every failing seed is printed with its replay command and its last steps;
the summary says how many seeds ran, how many violated an invariant, and how long it took.
Exits 1 if any seed failed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_simulation import run_seed  # noqa: E402


def main() -> int:
    count = int(os.environ.get("SOAK_SEEDS", "20000"))
    start = int(os.environ.get("SOAK_START", "0"))
    failed: list[int] = []
    began = time.monotonic()
    for seed in range(start, start + count):
        try:
            run_seed(seed)
        except AssertionError as exc:
            failed.append(seed)
            print(f"\n--- seed {seed} violated an invariant ---\n{exc}\n", flush=True)
        done = seed - start + 1
        if done % 1000 == 0:
            print(f"  {done:,} seeds, {len(failed)} violations, {time.monotonic() - began:.0f} s",
                  flush=True)
    elapsed = time.monotonic() - began
    print(f"soak: {count:,} seeds ({start}..{start + count - 1}), {len(failed)} violations, "
          f"{elapsed:.1f} s ({elapsed / max(count, 1) * 1000:.1f} ms a seed)")
    if failed:
        print("failing seeds: " + " ".join(map(str, failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
