"""Real in-memory implementations of the ports, one module per port: in the browser and on
CPython.

In the browser too: :class:`LoopClock` is the page's and the scheduler worker's clock (asyncio
timers on Pyodide's loop), and each tab's volatile engine runs in the page on a
:class:`VolatileStore`, with a private :class:`LockHub` and :class:`ChannelHub` and a
:func:`link_pair` between it and the page (pyjobq/executor/side.py, the outbox likewise).

On plain CPython they also back the queue (:class:`MemoryStore` and the hubs, so code that uses
it can be tested without a browser), and the multi-tab simulation (:mod:`pyjobq.testing`, whose
own fakes — the clock that moves when told to, freezable ports — live there) runs its tabs on
them. Each keeps the semantics of the browser API it stands for — asynchronous delivery,
structured copies, Web Locks' exclusive, shared, ``ifAvailable`` and ``steal`` — because an
implementation kinder than the browser would let races through.

- :mod:`~pyjobq.memory.store`: :class:`MemoryStore`, :class:`VolatileStore`
- :mod:`~pyjobq.memory.locks`: :class:`LockHub`, :class:`MemoryLocks`, :class:`MemoryLock`
- :mod:`~pyjobq.memory.channels`: :class:`ChannelHub`, :class:`MemoryChannel`
- :mod:`~pyjobq.memory.links`: :func:`link_pair`, :class:`MemoryLink`
- :mod:`~pyjobq.memory.clock`: :class:`LoopClock`
"""

from __future__ import annotations

from .channels import ChannelHub, MemoryChannel
from .clock import LoopClock
from .links import MemoryLink, link_pair
from .locks import LockHub, MemoryLock, MemoryLocks
from .store import MemoryStore, VolatileStore

__all__ = ["ChannelHub", "LockHub", "LoopClock", "MemoryChannel", "MemoryLink", "MemoryLock",
           "MemoryLocks", "MemoryStore", "VolatileStore", "link_pair"]
