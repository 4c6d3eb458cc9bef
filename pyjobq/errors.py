"""Every error pyjobq raises derives from :class:`PyjobqError` (see :mod:`pyjobq.core.errors`).

This is their public home: ``from pyjobq.errors import WorkerUnavailable`` works as it did
before the errors moved into the core, which raises most of them.
"""

from .core.errors import *  # noqa: F403  (the public path of every name in its __all__)
from .core.errors import __all__ as __all__
