"""Resource-neutral physical runtime fragments."""

from dataclasses import dataclass, field
from typing import Optional

_MAX_U64 = (1 << 64) - 1


def _int(value, name, minimum=0):
    if type(value) is not int:
        raise ValueError("%s must be an integer" % name)
    if value < minimum:
        raise ValueError("%s must be at least %d" % (name, minimum))
    return value


def _u64(value, name, minimum=0):
    if _int(value, name, minimum) > _MAX_U64:
        raise ValueError("%s must fit in an unsigned 64-bit integer" % name)
    return value


def _ints(values, name, minimum):
    if type(values) not in (tuple, list):
        raise ValueError("%s must be a tuple or list" % name)
    return tuple(_int(v, "%s[%d]" % (name, i), minimum) for i, v in enumerate(values))


def _address_range(address, nbytes):
    _u64(address, "address", 1)
    _u64(nbytes, "nbytes", 1)
    if nbytes > _MAX_U64 - address:
        raise ValueError("address range must fit in an unsigned 64-bit integer")


@dataclass(frozen=True)
class RuntimeBindingFragment:
    """One contiguous physical view (``address``, ``nbytes``, strides) of a logical placement
    fragment, inside its storage allocation. Strides of extent-1 dimensions are normalized
    to the row-major ones. ``owner`` (the framework's allocation guard) stays in this
    process: pickling drops it."""

    placement_fragment_id: str
    fragment_id: str
    address: int
    nbytes: int
    worker_id: str
    endpoint: str
    device: str
    itemsize: int
    local_shape: tuple
    strides_bytes: tuple
    storage_address: int
    storage_nbytes: int
    storage_offset_bytes: int
    owner: Optional[object] = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        for name in ("placement_fragment_id", "fragment_id", "worker_id", "endpoint", "device"):
            v = getattr(self, name)
            if type(v) is not str or not v:
                raise ValueError("%s must be a non-empty string" % name)
        _address_range(self.address, self.nbytes)
        _int(self.itemsize, "runtime itemsize", 1)
        shape = _ints(self.local_shape, "runtime local_shape", 1)
        strides = _ints(self.strides_bytes, "runtime strides_bytes", 0)
        if len(strides) != len(shape):
            raise ValueError("runtime stride rank differs from local_shape")
        if any(n > 1 and s == 0 for n, s in zip(shape, strides)):
            raise ValueError("runtime stride must be positive for non-singleton dimensions")
        row_major, step = [], self.itemsize
        for n in reversed(shape):
            row_major.append(step)
            step *= n
        row_major.reverse()
        strides = tuple(rm if n == 1 else s for n, s, rm in zip(shape, strides, row_major))
        object.__setattr__(self, "local_shape", shape)
        object.__setattr__(self, "strides_bytes", strides)
        _address_range(self.storage_address, self.storage_nbytes)
        _u64(self.storage_offset_bytes, "storage_offset_bytes")
        if self.storage_offset_bytes > _MAX_U64 - self.storage_address:
            raise ValueError("normalized runtime address must fit in 64 bits")
        if self.address != self.storage_address + self.storage_offset_bytes:
            raise ValueError("runtime address must equal storage_address plus storage_offset_bytes")
        if self.storage_offset_bytes > self.storage_nbytes - self.nbytes:
            raise ValueError("runtime view exceeds storage allocation bounds")

    def __reduce__(self):
        args = (self.placement_fragment_id, self.fragment_id, self.address, self.nbytes, self.worker_id,
                self.endpoint, self.device, self.itemsize, self.local_shape, self.strides_bytes,
                self.storage_address, self.storage_nbytes, self.storage_offset_bytes)
        return (type(self), args)
