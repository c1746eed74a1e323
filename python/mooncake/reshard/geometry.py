"""N-D logical boxes (an offset and a shape per box), resource-neutral.

``boxes_overlap`` answers whether any two boxes intersect. 1-D and 2-D inputs take a sweep
along one axis keeping the active boxes' intervals on the other axis sorted and disjoint
(an overlap ends the sweep at once), so they cost O(n log n) comparisons plus list inserts.
Three and more dimensions sweep along the axis with the most distinct intervals and compare
each box with the active ones, up to ``_MAX_HIGH_DIMENSIONAL_PAIRWISE_COMPARISONS``; past that
budget the answer is a ValueError rather than unbounded work.
"""

import bisect
import heapq
from math import prod

from ._compat import _strict_zip

try:
    from typing import Protocol
except ImportError:  # pragma: no cover - Python < 3.8
    from typing_extensions import Protocol

_MAX_HIGH_DIMENSIONAL_PAIRWISE_COMPARISONS = 1_000_000


class LogicalBox(Protocol):
    """A box: ``global_offset`` and ``local_shape``."""

    @property
    def global_offset(self): ...

    @property
    def local_shape(self): ...


class OverlapRegion(Protocol):
    """The logical part of a transfer region: ``overlap_offset`` and ``overlap_shape``."""

    @property
    def overlap_offset(self): ...

    @property
    def overlap_shape(self): ...


def box_contains(outer_offset, outer_shape, inner_offset, inner_shape):
    """Whether the inner box lies wholly inside the outer one."""
    return all(ob <= ib and ib + ie <= ob + oe
               for ob, oe, ib, ie in _strict_zip(outer_offset, outer_shape, inner_offset, inner_shape))


def _intersect(a_offset, a_shape, b_offset, b_shape):
    return all(a < b + bn and b < a + an for a, an, b, bn in _strict_zip(a_offset, a_shape, b_offset, b_shape))


def _sweep_disjoint_intervals(events):
    """events: (begin, end, lo, hi) per box (the sweep-axis interval, the other axis's).
    True when two boxes overlap."""
    events = sorted(events)
    active = []  # sorted disjoint (lo, hi, end) of boxes still open along the sweep axis
    expiry = []  # (end, lo, hi)
    for begin, end, lo, hi in events:
        while expiry and expiry[0][0] <= begin:
            e, l, h = heapq.heappop(expiry)
            active.pop(bisect.bisect_left(active, (l, h, e)))
        i = bisect.bisect_left(active, (lo, hi, end))
        if i > 0 and active[i - 1][1] > lo:
            return True
        if i < len(active) and active[i][0] < hi:
            return True
        active.insert(i, (lo, hi, end))
        heapq.heappush(expiry, (end, lo, hi))
    return False


def boxes_overlap(boxes):
    """Whether any two of ``boxes`` ((offset, shape) pairs of one rank) intersect."""
    if len(boxes) < 2:
        return False
    ndim = len(boxes[0][0])
    if ndim == 1:
        return _sweep_disjoint_intervals([(o[0], o[0] + s[0], 0, 1) for o, s in boxes])
    if ndim == 2:
        return _sweep_disjoint_intervals([(o[0], o[0] + s[0], o[1], o[1] + s[1]) for o, s in boxes])
    axis = max(range(ndim), key=lambda d: len({(o[d], o[d] + s[d]) for o, s in boxes}))
    order = sorted(range(len(boxes)), key=lambda i: boxes[i][0][axis])
    active, expiry, compared = {}, [], 0
    for i in order:
        offset, shape = boxes[i]
        while expiry and expiry[0][0] <= offset[axis]:
            active.pop(heapq.heappop(expiry)[1], None)
        for other_offset, other_shape in active.values():
            if compared >= _MAX_HIGH_DIMENSIONAL_PAIRWISE_COMPARISONS:
                raise ValueError("high-dimensional overlap budget exceeded before validation")
            compared += 1
            if _intersect(other_offset, other_shape, offset, shape):
                return True
        active[i] = (offset, shape)
        heapq.heappush(expiry, (offset[axis] + shape[axis], i))
    return False


def boxes_exactly_cover(container_offset, container_shape, boxes):
    """Whether ``boxes`` tile the container: all inside it, none overlapping, volumes adding up."""
    if not boxes:
        return False
    if not all(box_contains(container_offset, container_shape, o, s) for o, s in boxes):
        return False
    if sum(prod(s) for _, s in boxes) != prod(container_shape):
        return False
    return not boxes_overlap(boxes)


def regions_exactly_cover(target, regions):
    """Whether the overlap regions tile the target box."""
    return boxes_exactly_cover(target.global_offset, target.local_shape,
                               tuple((r.overlap_offset, r.overlap_shape) for r in regions))


__all__ = ["LogicalBox", "OverlapRegion", "box_contains", "boxes_exactly_cover", "boxes_overlap",
           "regions_exactly_cover"]
