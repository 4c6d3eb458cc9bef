"""One way to listen to a link or a channel: :class:`Router`.

Every receiver of pyjobq's messages — the scheduler on its link and channel, the page's
engine clients, the lease's two ends, the worker's host — does the same three things: parse
what arrives (:func:`~pyjobq.core.messages.parse`), log and drop what is not one of ours,
and hand the rest to the handler of its type. A router is that, once. Several listeners
may share a link (the lease's end listens beside the scheduler): each says which types it
leaves to the others (``ignore``), and one that only picks a few types out (``quiet``)
neither parses nor logs the rest, so a bad message is logged once, by the link's owner.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Collection, Mapping

from .messages import BadMessage, parse

log = logging.getLogger("pyjobq")

Handler = Callable[[dict[str, Any]], Any]


class Router:
    """A listener that parses each message and calls ``handlers[its type](msg)``.

    Args:
        name: who listens, for the log (``"pyjobq scheduler"``).
        handlers: message type → handler of the parsed message.
        ignore: types other listeners on the same link handle: dropped without a word.
        kind, origin: for the log, what and from where (``"channel"``; ``"its worker"``):
            "pyjobq ignored a channel message: …", "pyjobq ignored a message from its worker: …".
        quiet: look only at the types in ``handlers``; say nothing of anything else (a
            listener beside the link's owner, which logs what is wrong).
        refuse: called with what arrived and why it is not a message, after logging it: a
            receiver that answers requests tells the sender of a malformed one (it would
            otherwise wait for a reply that never comes).
    """

    def __init__(self, name: str, handlers: Mapping[str, Handler], *, ignore: Collection[str] = (),
                 kind: str = "", origin: str = "", quiet: bool = False,
                 refuse: Callable[[Any, str], None] | None = None) -> None:
        self.name = name
        self.handlers = dict(handlers)
        self.ignore = frozenset(ignore)
        self._what = ((f"{kind} " if kind else "") + "message"
                      + (f" from {origin}" if origin else ""))
        self.quiet = quiet
        self.refuse = refuse

    def __call__(self, data: Any) -> None:
        if self.quiet and not (isinstance(data, dict) and data.get("type") in self.handlers):
            return
        try:
            msg = parse(data)
        except BadMessage as exc:
            if not self.quiet:
                log.warning("%s ignored a %s: %s", self.name, self._what, exc)
                if self.refuse is not None:
                    self.refuse(data, f"{self.name} refused a malformed request: {exc}")
            return
        handler = self.handlers.get(msg["type"])
        if handler is not None:
            handler(msg)
        elif msg["type"] not in self.ignore and not self.quiet:
            log.warning("%s ignored a %r %s", self.name, msg["type"], self._what)
