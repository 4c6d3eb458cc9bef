"""The error codes pyjobq itself sets: :class:`Code` (the table is :mod:`pyjobq.core.codes`)."""

from .core.codes import Code

__all__ = ["Code"]
