"""Every error pyjobq raises derives from :class:`PyjobqError` (see :mod:`pyjobq.core.errors`).

This is their public home: ``from pyjobq.errors import WorkerUnavailable`` works as it did
before the errors moved into the core, which raises most of them. :class:`JobFailed`
(``job.result()`` of a job that failed or was cancelled) is here too.
"""

from .core.errors import *  # noqa: F403  (the public path of every name in its __all__)
from .core.errors import __all__ as _core
from .core.outcome import JobFailed

__all__ = [*_core, "JobFailed"]
