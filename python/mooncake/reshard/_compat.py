"""Helpers for the Python versions the reshard contracts support."""

import sys

_END = object()

if sys.version_info >= (3, 10):
    def _strict_zip(*iterables):
        """``zip(..., strict=True)``: ValueError("... different lengths") when the lengths differ."""
        try:
            yield from zip(*iterables, strict=True)
        except ValueError as error:
            if not str(error).startswith("zip()"):
                raise
            raise ValueError("zip() arguments have different lengths") from None
else:  # pragma: no cover - Python 3.9
    def _strict_zip(*iterables):
        """``zip(..., strict=True)`` for Python 3.9: ValueError when the lengths differ."""
        iterators = [iter(it) for it in iterables]
        if not iterators:
            return
        while True:
            row = tuple(next(it, _END) for it in iterators)
            done = [v is _END for v in row]
            if all(done):
                return
            if any(done):
                raise ValueError("zip() arguments have different lengths")
            yield row
