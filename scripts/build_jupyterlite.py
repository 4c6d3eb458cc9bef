"""Build a real JupyterLite site, offline, and put it at ``build/site/lite/``.

Theory of operation
-------------------
``tests/e2e/jupyterlite.spec.js`` drives JupyterLite as its users have it: the site that
``jupyter lite build`` makes from the registry packages ``jupyterlite-core`` and
``jupyterlite-pyodide-kernel`` (pinned in ``requirements-jupyterlite.txt``), its Pyodide
kernel, and pyjobq installed in a cell with ``%pip install pyjobq``. Nothing here is
JupyterLite built by hand; the only differences from a stock site are where its two
downloads come from, since no CDN is reachable:

- ``--pyodide <tarball>``: a bzip2 tarball (the only archive the kernel's addon unpacks) of
  ``build/cdn/pyodide/v314.0.6/full/``, the stock-shaped 314.0.6 distribution that
  ``scripts/build_site.py`` lays out — the version jupyterlite-pyodide-kernel 0.8.6 pins. Its
  lock does *not* list pyjobq. It does list what the kernel installs when it starts
  (``comm``, ``ipython``, ``jedi`` and their dependencies, the pure wheels of
  ``scripts/cdn-wheels.txt``): the kernel's micropip takes those from the lock before any
  index, and on the public CDN they are in the lock too.
- ``--piplite-wheels build/dist/pyjobq-*.whl``: pyjobq's wheel, indexed in the site's
  ``pypi/all.json``, where piplite (``%pip install``) looks before PyPI — as a site author
  does who ships a wheel with the site; on a stock site piplite would find it on PyPI.

``build_site.py`` replaces ``build/site`` wholesale on every run, so the JupyterLite build
lives in ``build/jupyterlite/`` and is copied into ``build/site/lite/`` afterwards. It is
rebuilt only when one of its inputs changed (the pins and the installed versions, the pyjobq
wheel's sha256, every file of the distribution, this script), so ``make build`` stays quick.

Needs the venv's python (``.venv/bin/python scripts/build_jupyterlite.py``), after
``scripts/build_site.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "requirements-jupyterlite.txt"
#: The Pyodide version jupyterlite-pyodide-kernel 0.8.6 is built for (its constants.py).
PYODIDE_VERSION = "314.0.6"


def log(msg: str) -> None:
    print(f"[build_jupyterlite] {msg}", flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_pins() -> dict[str, str]:
    """The installed versions of the pinned packages; exits if the venv disagrees with the pins."""
    from packaging.requirements import Requirement

    installed = {}
    for line in PINS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            raise SystemExit(
                f"{req.name} is not installed in {sys.prefix}: run `make setup`") from None
        if not req.specifier.contains(version, prereleases=True):
            raise SystemExit(
                f"{req.name} {version} is installed, {PINS.name} pins {req}: run `make setup`")
        installed[req.name] = version
    from jupyterlite_pyodide_kernel import constants

    if constants.PYODIDE_VERSION != PYODIDE_VERSION:
        raise SystemExit(
            f"jupyterlite-pyodide-kernel wants Pyodide {constants.PYODIDE_VERSION}, "
            f"this script builds with {PYODIDE_VERSION}: "
            "update PYODIDE_VERSION and the distribution"
        )
    return installed


def find_wheel(dist: Path) -> Path:
    wheels = sorted(dist.glob("pyjobq-*-py3-none-any.whl"))
    if len(wheels) != 1:
        raise SystemExit(
            f"expected one pyjobq wheel in {dist} (run scripts/build_site.py first), got {wheels}")
    return wheels[0]


def check_distribution(pyodide_dir: Path) -> None:
    lock_path = pyodide_dir / "pyodide-lock.json"
    if not lock_path.is_file():
        raise SystemExit(f"{lock_path} is missing: run scripts/build_site.py first")
    version = json.loads((pyodide_dir / "package.json").read_text())["version"]
    if version != PYODIDE_VERSION:
        raise SystemExit(f"{pyodide_dir} holds Pyodide {version}, not {PYODIDE_VERSION}")
    packages = json.loads(lock_path.read_text())["packages"]
    if "pyjobq" in packages:
        raise SystemExit(f"{lock_path} lists pyjobq: a JupyterLite user's lock does not")
    missing = [name for name in ("comm", "ipython", "jedi") if name not in packages]
    if missing:
        raise SystemExit(
            f"{lock_path} lacks {missing}, which the kernel installs at start: see "
            "scripts/cdn-wheels.txt")


def inputs_key(installed: dict[str, str], wheel: Path, pyodide_dir: Path) -> dict:
    return {
        "pins": PINS.read_text(),
        "installed": installed,
        "wheel": {wheel.name: sha256(wheel)},
        "pyodide": {p.name: sha256(p) for p in sorted(pyodide_dir.iterdir()) if p.is_file()},
        "script": sha256(Path(__file__)),
    }


def make_tarball(pyodide_dir: Path, out: Path) -> None:
    """``pyodide/<files>`` as the addon expects (it unpacks to ``<cache>/pyodide/pyodide/``)."""
    def normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    with tarfile.open(out, "w:bz2") as tar:
        tar.add(pyodide_dir, arcname="pyodide", recursive=False, filter=normalize)
        for path in sorted(pyodide_dir.iterdir()):
            if path.is_file():
                tar.add(path, arcname=f"pyodide/{path.name}", filter=normalize)


def lite_build(tarball: Path, wheel: Path, lite_dir: Path, output: Path) -> None:
    for path in (lite_dir, output):
        if path.exists():
            shutil.rmtree(path)
    lite_dir.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTERLITE_")}
    cmd = [
        sys.executable, "-m", "jupyterlite_core", "build",
        "--lite-dir", str(lite_dir),
        "--output-dir", str(output),
        "--pyodide", str(tarball),
        "--piplite-wheels", str(wheel),
        "--no-sourcemaps",
    ]
    log(" ".join(["jupyter lite build", *cmd[4:]]).replace(str(ROOT) + "/", ""))
    proc = subprocess.run(cmd, cwd=lite_dir, env=env, capture_output=True, text=True)
    (lite_dir.parent / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(
            f"jupyter lite build failed ({proc.returncode}); see {lite_dir.parent / 'build.log'}")


def check_output(output: Path, wheel: Path) -> None:
    """The site points its kernel at the local Pyodide and indexes the wheel, or we stop here."""
    config = json.loads((output / "jupyter-lite.json").read_text())["jupyter-config-data"]
    kernel = config["litePluginSettings"]["@jupyterlite/pyodide-kernel-extension:kernel"]
    if kernel.get("pyodideUrl") != "./static/pyodide/pyodide.mjs":
        raise SystemExit(
            f"the site's pyodideUrl is {kernel.get('pyodideUrl')!r}, not the local distribution")
    index = json.loads((output / "pypi" / "all.json").read_text())
    if "pyjobq" not in index or not (output / "pypi" / wheel.name).is_file():
        raise SystemExit(f"{output / 'pypi'} does not index {wheel.name}")
    if not (output / "extensions" / "@jupyterlite" / "pyodide-kernel-extension").is_dir():
        raise SystemExit("the Pyodide kernel's labextension is not in the site")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyodide", type=Path,
                    default=ROOT / "build" / "cdn" / "pyodide" / f"v{PYODIDE_VERSION}" / "full")
    ap.add_argument("--dist", type=Path, default=ROOT / "build" / "dist",
                    help="where the pyjobq wheel is")
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "jupyterlite")
    ap.add_argument("--site", type=Path, default=ROOT / "build" / "site")
    ap.add_argument("--force", action="store_true", help="rebuild even if no input changed")
    args = ap.parse_args()

    t0 = time.monotonic()
    installed = check_pins()
    wheel = find_wheel(args.dist)
    check_distribution(args.pyodide)
    key = inputs_key(installed, wheel, args.pyodide)
    cache = args.cache
    output = cache / "output"
    key_file = cache / "inputs.json"

    if (not args.force and output.is_dir() and key_file.is_file()
            and json.loads(key_file.read_text()) == key):
        log(f"up to date ({wheel.name}, Pyodide {PYODIDE_VERSION}, jupyterlite-core "
            f"{installed['jupyterlite-core']})")
    else:
        cache.mkdir(parents=True, exist_ok=True)
        key_file.unlink(missing_ok=True)
        tarball = cache / f"pyodide-{PYODIDE_VERSION}.tar.bz2"
        make_tarball(args.pyodide, tarball)
        log(f"packed {tarball.relative_to(ROOT) if tarball.is_relative_to(ROOT) else tarball} "
            f"({tarball.stat().st_size // 1_000_000} MB) in {time.monotonic() - t0:.1f}s")
        tmp = cache / "output.tmp"
        lite_build(tarball, wheel, cache / "lite-dir", tmp)
        check_output(tmp, wheel)
        if output.exists():
            shutil.rmtree(output)
        tmp.rename(output)
        key_file.write_text(json.dumps(key, indent=1, sort_keys=True) + "\n")
        log(f"built {output.relative_to(ROOT) if output.is_relative_to(ROOT) else output} in "
            f"{time.monotonic() - t0:.1f}s")

    if not args.site.is_dir():
        raise SystemExit(f"{args.site} is missing: run scripts/build_site.py first")
    dest = args.site / "lite"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(output, dest)
    log(f"copied the site to {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest} "
        f"({time.monotonic() - t0:.1f}s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
