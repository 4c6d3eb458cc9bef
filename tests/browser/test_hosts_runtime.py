"""What the executor side tells its scheduler worker about the page's Pyodide and pyjobq,
read in real Chromium: the one private Pyodide read is pinned here, so a Pyodide release
that moves it fails this test instead of leaving workers without a distribution."""

from pytest_pyodide import run_in_pyodide


@run_in_pyodide(packages=["pyjobq"])
def test_the_private_index_url_read_is_where_pyodide_keeps_it(selenium):
    import js
    import pyodide_js

    from pyjobq.browser.page_main import page_index_url

    # The private attribute itself, as runtime.page_index_url reads it: if Pyodide renames
    # or drops it, this is the assertion that fails.
    raw = pyodide_js._api.config.indexURL
    assert isinstance(raw, str) and raw.endswith("/")
    assert page_index_url() == raw
    # It is the folder this page's Pyodide came from: pyodide.mjs is there.
    request = js.XMLHttpRequest.new()
    request.open("HEAD", raw + "pyodide.mjs", False)
    request.send()
    assert request.status == 200
    # The public lock base agrees on a distribution loaded the ordinary way.
    assert str(pyodide_js.lockfileBaseUrl).rstrip("/") + "/" == raw


@run_in_pyodide(packages=["pyjobq"])
def test_distribution_hands_the_worker_the_pages_lock(selenium):
    import json

    from pyjobq.browser.page_main import distribution
    from pyjobq.config import Settings

    index, lock_json, base = distribution(Settings())
    lock = json.loads(lock_json)
    assert "pyjobq" in lock["packages"]          # this distribution's lock lists it...
    assert base == index
    # ...and a configured distribution is taken as given, with its own lock.
    index, lock_json, base = distribution(
        Settings(pyodide_url="https://cdn.example/pyodide/v1/full/"))
    assert (index, lock_json, base) == ("https://cdn.example/pyodide/v1/full/", None, None)


@run_in_pyodide(packages=["pyjobq"])
def test_the_bundle_is_the_pyjobq_this_page_imported(selenium):
    import io
    import zipfile
    from importlib import metadata, resources

    from pyjobq.browser.page_main import pyjobq_bundle

    archive = zipfile.ZipFile(io.BytesIO(pyjobq_bundle()))
    names = set(archive.namelist())
    assert {"pyjobq/__init__.py", "pyjobq/browser/worker_main.py", "pyjobq/browser/worker.mjs",
            "pyjobq/core/policy.py", "pyjobq/py.typed"} <= names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    # Byte for byte the files this page runs.
    for name in ("pyjobq/__init__.py", "pyjobq/engine/scheduler.py", "pyjobq/browser/idb.py"):
        assert archive.read(name) == (
            resources.files("pyjobq").joinpath(name.split("/", 1)[1]).read_bytes())
    version = metadata.version("pyjobq")
    assert f"pyjobq-{version}.dist-info/METADATA" in names
    assert pyjobq_bundle() is pyjobq_bundle()    # built once per page
