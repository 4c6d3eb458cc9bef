"""The executor side: where user code runs, on the page only.

A page's main thread, a PyScript worker or a notebook kernel: wherever the user's Python is.
:mod:`~pyjobq.executor.side` is the public API's engine (:class:`ExecutorSide`),
:mod:`~pyjobq.executor.runner` runs jobs, :mod:`~pyjobq.executor.client` talks to one engine,
:mod:`~pyjobq.executor.registry` keeps job handles and listeners, :mod:`~pyjobq.executor.boot`
follows the scheduler worker's boot, :mod:`~pyjobq.executor.wiring` builds an engine in this
process and :mod:`~pyjobq.executor.page` assembles a page's queue from its host's ports (the
hosts themselves are :mod:`pyjobq.hosts`). ``current_job_id`` and ``report_progress`` are
importable from here.
"""

from .current import current_job_id, report_progress

__all__ = ["current_job_id", "report_progress"]
