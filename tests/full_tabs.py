"""Old names, kept for branches written before issue 16: every :class:`pyjobq.testing.Tab` is
wired like the browser's now (the world's clock, the page's own locks, ``yields``, ``published``)."""

from typing import Any

from pyjobq.testing import Tab as FullTab  # noqa: F401
from pyjobq.testing import World


def open_full_tab(world: World, **kw: Any) -> FullTab:
    """``world.open_tab(**kw)``."""
    return world.open_tab(**kw)
