"""The offline Pyodide distribution in build/site/pyodide runs pyjobq in real Chromium."""

from pytest_pyodide import run_in_pyodide


@run_in_pyodide(packages=["pyjobq"])
def test_pyjobq_imports_in_pyodide(selenium):
    import sys

    import js

    import pyjobq

    assert sys.platform == "emscripten"
    assert pyjobq.__name__ == "pyjobq"
    assert hasattr(js, "indexedDB")
    assert js.indexedDB.open is not None
