"""Browser adapters: IndexedDB, Web Locks, BroadcastChannel, the worker link.

The only package of pyjobq that imports ``js`` and ``pyodide``. Every proxy and
listener made here is released here.
"""
