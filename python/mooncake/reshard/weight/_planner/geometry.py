"""Box overlaps and the compact strided byte geometry of one transfer region.

A region copies the overlap of a source and a target box. Both fragments are contiguous
row-major buffers, so the overlap's trailing dimensions that are whole in both fragments fold
into one contiguous ``inner_bytes`` run; the remaining leading dimensions become outer loops with
each side's byte strides.
"""

import bisect
from math import prod

from ..storage_manifest import StoredFragment
from ..types import canonical_strides_bytes


def _fragment_itemsize(fragment):
    elements = prod(fragment.local_shape)
    if elements <= 0 or fragment.nbytes % elements:
        raise ValueError("transfer region fragment byte size is invalid")
    itemsize = fragment.nbytes // elements
    if itemsize <= 0:
        raise ValueError("transfer region fragment itemsize is invalid")
    return itemsize


def _validate_outer_strides(counts, strides, inner_bytes, side):
    """Each outer loop must step past everything the loops inside it touch."""
    span = inner_bytes
    for count, stride in zip(reversed(counts), reversed(strides)):
        if count > 1 and stride < span:
            raise ValueError(f"transfer region {side} strides overlap")
        span += (count - 1) * stride


def _overlap_box(source, target):
    """The (offset, shape) intersection of two boxes, or None."""
    if len(source.global_offset) != len(target.global_offset):
        raise ValueError("zip() arguments have different lengths")
    begin = tuple(max(a, b) for a, b in zip(source.global_offset, target.global_offset))
    end = tuple(min(a + n, b + m) for a, n, b, m in zip(source.global_offset, source.local_shape,
                                                          target.global_offset, target.local_shape))
    shape = tuple(e - b for b, e in zip(begin, end))
    if any(n <= 0 for n in shape):
        return None
    return begin, shape


def _derive_region_geometry(source, target, overlap_offset, overlap_shape):
    """(source_base, target_base, inner_bytes, outer_counts, source_strides, target_strides)."""
    itemsize = _fragment_itemsize(source)
    if _fragment_itemsize(target) != itemsize:
        raise ValueError("transfer region source and target itemsize differ")
    s_strides = canonical_strides_bytes(source.local_shape, itemsize)
    t_strides = canonical_strides_bytes(target.local_shape, itemsize)
    s_base = sum((o - b) * s for o, b, s in zip(overlap_offset, source.global_offset, s_strides))
    t_base = sum((o - b) * s for o, b, s in zip(overlap_offset, target.global_offset, t_strides))
    ndim = len(overlap_shape)
    first = ndim - 1
    inner = overlap_shape[-1] * itemsize
    while first > 0 and s_strides[first - 1] == inner and t_strides[first - 1] == inner:
        first -= 1
        inner *= overlap_shape[first]
    return s_base, t_base, inner, tuple(overlap_shape[:first]), s_strides[:first], t_strides[:first]


def _transfer_region(tensor, source, target, overlap_offset, overlap_shape):
    from .contracts import TransferRegion
    if _fragment_itemsize(source) != tensor.itemsize or _fragment_itemsize(target) != tensor.itemsize:
        raise ValueError("transfer region fragment itemsize differs from descriptor")
    s_base, t_base, inner, counts, s_strides, t_strides = _derive_region_geometry(source, target, overlap_offset,
                                                                                  overlap_shape)
    return TransferRegion(tensor_id=tensor.tensor_id, source=source, target=target, overlap_offset=overlap_offset,
                          overlap_shape=overlap_shape, source_base_offset=s_base, target_base_offset=t_base,
                          inner_bytes=inner, outer_loop_counts=counts, source_strides=s_strides,
                          target_strides=t_strides)


def _geometry_key(fragment):
    return fragment.tensor_id, fragment.global_offset, fragment.local_shape


def _source_sort_key(fragment):
    if isinstance(fragment, StoredFragment):
        return (0, 0, 0, 0, fragment.object_key, fragment.fragment_id)
    r = fragment.rank
    return (r.dp, r.pp, r.ep, r.tp, fragment.fragment_id)


class _CandidateBoxIndex:
    """Groups of same-geometry source fragments indexed along the dimension with the most distinct
    intervals: a query returns the groups whose interval on that dimension meets the target's
    (sorted begins plus the longest interval bound the search window)."""

    def __init__(self, dimension, entries):
        self.dimension = dimension
        self._entries = sorted(entries, key=lambda e: (e[0], e[1]))
        self._begins = [e[0] for e in self._entries]
        self._longest = max((e[1] - e[0] for e in self._entries), default=0)

    @classmethod
    def build(cls, groups):
        if not groups:
            raise ValueError("candidate box index requires source fragments")
        ndim = len(groups[0][0].global_offset)

        def distinct(d):
            return len({(g[0].global_offset[d], g[0].global_offset[d] + g[0].local_shape[d]) for g in groups}), -d

        dim = max(range(ndim), key=distinct)
        return cls(dim, [(g[0].global_offset[dim], g[0].global_offset[dim] + g[0].local_shape[dim], i, g)
                         for i, g in enumerate(groups)])

    def query(self, target):
        begin = target.global_offset[self.dimension]
        end = begin + target.local_shape[self.dimension]
        lo = bisect.bisect_right(self._begins, begin - self._longest)
        hi = bisect.bisect_left(self._begins, end)
        return tuple(e[3] for e in self._entries[lo:hi] if e[1] > begin)
