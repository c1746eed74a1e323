"""Helpers for the Python versions the reshard contracts support."""

_END = object()


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
