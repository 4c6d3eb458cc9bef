"""Build the offline site: a local Pyodide distribution plus the pages under web/.

Theory of operation
-------------------
No CDN is reachable here, so Pyodide's own ``pyodide-lock.json`` (whose packages would be
fetched from jsDelivr) is useless as is. This script lays out::

    build/site/
        pyodide/        core files from node_modules/pyodide + pure-Python wheels
                        + a pyodide-lock.json regenerated from exactly those wheels
        pyscript/       PyScript's browser bundle (node_modules/@pyscript/core/dist,
                        without source maps): pages load /pyscript/core.js and point
                        its config at /pyodide/pyodide.mjs instead of its default CDN
        **              everything under web/ (demo and test pages)

Steps: build pyjobq's wheel (hatchling, no isolation: the backend is pinned in the venv),
download the wheels pinned in ``scripts/pyodide-wheels.txt`` from PyPI once into
``build/wheel-cache/``, copy everything into place, and regenerate the lock with
``pyodide_lock.utils.add_wheels_to_spec``. Base-lock entries whose files are not shipped
here are dropped, so ``loadPackage`` fails fast with "not found" instead of hanging on a
CDN request; names in the lock carry a sha256 that Pyodide checks on load.

It also lays out ``build/cdn/``: what a user's page reaches on the public registries,
rebuilt offline, for the host tests (tests/e2e/cdn.js routes the real host names to it)::

    build/cdn/
        pyodide/v<version>/full/   a stock-shaped distribution per Pyodide version users meet
                                   (314.0.7 = ours, 314.0.2 = PyScript 0.7.31's default,
                                   314.0.6 = jupyterlite-pyodide-kernel 0.8.6's): core files
                                   and the pure wheels of ``scripts/cdn-wheels.txt``, its lock
                                   regenerated from the stock one — without pyjobq, like the CDN
        pypi/simple/pyjobq/index.json   a PEP 691 JSON page, as PyPI's Simple API answers
        pypi/files/<wheel>              pyjobq's wheel, where that page points

Needs Python >= 3.12 (pyodide-lock 0.2.1) — run it with the venv's python.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Files of the npm package that a browser needs (the .d.ts/.map/console pages are not).
PYODIDE_CORE_FILES = [
    "pyodide.mjs",
    "pyodide.js",
    "pyodide.asm.mjs",
    "pyodide.asm.wasm",
    "python_stdlib.zip",
    "package.json",
]


def log(msg: str) -> None:
    print(f"[build_site] {msg}", flush=True)


def read_pins(path: Path) -> list[str]:
    pins = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pins.append(line)
    return pins


def build_pyjobq_wheel(src: Path, dist: Path) -> Path:
    if dist.exists():
        shutil.rmtree(dist)
    dist.mkdir(parents=True)
    # --no-isolation: hatchling is pinned in requirements-dev.txt, and an isolated build
    # would reach PyPI on every run.
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
         str(src)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wheels = sorted(dist.glob("pyjobq-*.whl"))
    if len(wheels) != 1 or not wheels[0].name.endswith("-py3-none-any.whl"):
        raise SystemExit(
            f"expected one pure pyjobq wheel in {dist}, got {[w.name for w in wheels]}")
    return wheels[0]


def fetch_pinned_wheels(pins: list[str], cache: Path) -> list[Path]:
    """Return one cached wheel per pin, downloading only the missing ones."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename

    cache.mkdir(parents=True, exist_ok=True)

    def find(pin: str) -> Path | None:
        req = Requirement(pin)
        want = canonicalize_name(req.name)
        for whl in cache.glob("*.whl"):
            name, version, _, _ = parse_wheel_filename(whl.name)
            if name == want and req.specifier.contains(version, prereleases=True):
                return whl
        return None

    missing = [p for p in pins if find(p) is None]
    if missing:
        log(f"downloading {' '.join(missing)}")
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--quiet",
                "--only-binary=:all:", "--no-deps",
                # Pyodide 314 runs CPython 3.14; pick wheels for it, not for the venv.
                "--python-version", "3.14",
                "--dest", str(cache),
                *missing,
            ],
            check=True,
        )
    found = []
    for pin in pins:
        whl = find(pin)
        if whl is None:
            raise SystemExit(f"pip did not produce a wheel for {pin}")
        found.append(whl)
    return found


#: The Pyodide versions a user's page loads from the CDN (npm package folder per version).
CDN_PYODIDES = {
    "314.0.7": "pyodide",          # ours, and what the README's CDN example names
    "314.0.2": "pyodide-314.0.2",  # @pyscript/core 0.7.31's default interpreter
    "314.0.6": "pyodide-314.0.6",  # jupyterlite-pyodide-kernel 0.8.6's default
}


def build_distribution(npm_pyodide: Path, wheels: list[Path], out: Path) -> None:
    """Lay out one offline Pyodide distribution in ``out``: the npm package's core files,
    ``wheels``, and a lock regenerated from the package's own lock with exactly those."""
    if not (npm_pyodide / "pyodide.asm.wasm").is_file():
        raise SystemExit(f"{npm_pyodide} is missing: run `make setup` (npm ci) first")
    out.mkdir(parents=True, exist_ok=True)
    for name in PYODIDE_CORE_FILES:
        shutil.copy2(npm_pyodide / name, out / name)
    local = []
    for whl in wheels:
        shutil.copy2(whl, out / whl.name)
        local.append(out / whl.name)
    write_lock(npm_pyodide / "pyodide-lock.json", out, local)


def build_cdn(node_modules: Path, pyjobq_whl: Path, out: Path) -> None:
    """``build/cdn``: the stand-in for the CDN and PyPI that users' pages reach (see above)."""
    wheels = fetch_pinned_wheels(read_pins(ROOT / "scripts" / "cdn-wheels.txt"),
                                 ROOT / "build" / "wheel-cache")
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    for version, folder in CDN_PYODIDES.items():
        build_distribution(node_modules / folder, wheels, tmp / "pyodide" / f"v{version}" / "full")
    files = tmp / "pypi" / "files"
    files.mkdir(parents=True)
    shutil.copy2(pyjobq_whl, files / pyjobq_whl.name)
    digest = hashlib.sha256(pyjobq_whl.read_bytes()).hexdigest()
    page = tmp / "pypi" / "simple" / "pyjobq"
    page.mkdir(parents=True)
    (page / "index.json").write_text(json.dumps({
        "meta": {"api-version": "1.1"},
        "name": "pyjobq",
        "versions": [pyjobq_whl.name.split("-")[1]],
        "files": [{
            "filename": pyjobq_whl.name,
            "url": f"https://files.pythonhosted.org/packages/pyjobq/{pyjobq_whl.name}",
            "hashes": {"sha256": digest},
            "requires-python": ">=3.11",
            "size": pyjobq_whl.stat().st_size,
            "upload-time": "2026-12-01T00:00:00.000000Z",
            "yanked": False,
        }],
    }, indent=1) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    log(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}: Pyodide "
        f"{', '.join(CDN_PYODIDES)}")


def write_lock(base_lock: Path, pyodide_dir: Path, wheels: list[Path]) -> None:
    from pyodide_lock import PyodideLockSpec
    from pyodide_lock.utils import add_wheels_to_spec

    spec = PyodideLockSpec.from_json(base_lock)
    # Drop what this distribution does not ship (everything in the base lock lives on
    # the CDN). Keep nothing whose file is absent: offline, a listed-but-missing package
    # turns into a failed fetch at load time instead of a clear "unknown package".
    spec.packages = {
        name: pkg for name, pkg in spec.packages.items() if (pyodide_dir / pkg.file_name).is_file()
    }
    spec = add_wheels_to_spec(spec, wheels, base_path=pyodide_dir)
    spec.to_json(pyodide_dir / "pyodide-lock.json", indent=1)
    log(f"pyodide-lock.json: {', '.join(sorted(spec.packages))}")


def copy_tree(src: Path, dst: Path, skip_suffixes: tuple[str, ...] = ()) -> int:
    n = 0
    for path in sorted(src.rglob("*")):
        if (path.is_file() and "__pycache__" not in path.parts
                and not path.name.endswith(skip_suffixes)):
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=ROOT, help="project to build the pyjobq wheel from")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    ap.add_argument("--node-modules", type=Path, default=ROOT / "node_modules")
    ap.add_argument("--web", type=Path, default=ROOT / "web")
    args = ap.parse_args()

    t0 = time.monotonic()
    build_dir = ROOT / "build"
    npm_pyodide = args.node_modules / "pyodide"
    if not (npm_pyodide / "pyodide.asm.wasm").is_file():
        raise SystemExit(f"{npm_pyodide} is missing: run `make setup` (npm ci) first")

    pyjobq_whl = build_pyjobq_wheel(args.src, build_dir / "dist")
    log(f"built {pyjobq_whl.name}")
    extra = fetch_pinned_wheels(read_pins(ROOT / "scripts" / "pyodide-wheels.txt"),
                                build_dir / "wheel-cache")

    # Lay the site out afresh in a temp dir, then swap it in, so a failed build never
    # leaves a half-written site that a test server would happily serve.
    out = args.out.resolve()
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    build_distribution(npm_pyodide, [pyjobq_whl, *extra], tmp / "pyodide")

    # PyScript's dist is a set of ES modules that import each other by relative name
    # (core.js -> core-<hash>.js -> lazily toml/zip/pyodide_graph/...): ship all of it.
    pyscript_dist = args.node_modules / "@pyscript" / "core" / "dist"
    if not (pyscript_dist / "core.js").is_file():
        raise SystemExit(f"{pyscript_dist} is missing: run `make setup` (npm ci) first")
    n = copy_tree(pyscript_dist, tmp / "pyscript", skip_suffixes=(".map",))
    log(f"copied {n} PyScript files")

    if args.web.is_dir():
        n = copy_tree(args.web, tmp)
        log(f"copied {n} files from {args.web.name}/")
    # A served copy of the worker script, as a page under a CSP without blob: workers serves
    # it (configure(worker_url="/pyjobq-worker.mjs"); tests/e2e/worker_start.spec.js).
    shutil.copy2(ROOT / "pyjobq" / "browser" / "worker.mjs", tmp / "pyjobq-worker.mjs")
    # pyjobq's Service Worker, as `python -m pyjobq.service_worker --index /pyodide/` writes it
    # (configure(service_worker="/pyjobq-sw.mjs"); tests/e2e/service_worker.spec.js).
    sw = subprocess.run([sys.executable, "-m", "pyjobq.service_worker", "--index", "/pyodide/"],
                        check=True, capture_output=True, text=True, cwd=ROOT).stdout
    (tmp / "pyjobq-sw.mjs").write_text(sw)

    # Small manifest for tests and benchmarks that want to know what they run against.
    pkg = json.loads((npm_pyodide / "package.json").read_text())
    (tmp / "build-info.json").write_text(
        json.dumps({
            "pyodide": pkg["version"],
            "pyscript": json.loads((pyscript_dist.parent / "package.json").read_text())["version"],
            "pyjobq_wheel": pyjobq_whl.name,
        }, indent=1) + "\n"
    )

    if (out / "lite").is_dir():
        # scripts/build_jupyterlite.py's site: kept across this swap (it refreshes it itself).
        (out / "lite").rename(tmp / "lite")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    build_cdn(args.node_modules, pyjobq_whl, build_dir / "cdn")
    log(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} in "
        f"{time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
