"""Value checks shared by the weight contracts (each raises ValueError with the field's name)."""

import hashlib
import json
from collections.abc import Sequence

MAX_U64 = (1 << 64) - 1


def text(value, name):
    if type(value) is not str or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def integer(value, name, minimum=None):
    if type(value) is not int:
        raise ValueError(f"{name} must be an integer")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}")
    return value


def u64(value, name, minimum=0):
    integer(value, name, minimum)
    if value > MAX_U64:
        raise ValueError(f"{name} must fit in an unsigned 64-bit integer")
    return value


def sequence(value, name):
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a sequence")
    return value


def integers(value, name, minimum):
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must contain integers")
    return tuple(integer(v, name, minimum) for v in value)


def items(value, name, kind):
    out = tuple(sequence(value, name))
    if any(not isinstance(v, kind) for v in out):
        raise ValueError(f"{name} must contain {kind.__name__}")
    return out


def sha256_hex(value, name):
    text(value, name)
    if len(value) != 64 or value.strip("0123456789abcdef"):
        raise ValueError(f"{name} must be a lowercase SHA-256 digest")
    return value


def canonical_json(content):
    return json.dumps(content, sort_keys=True, separators=(",", ":"))


def digest_of(content):
    """Hex SHA-256 of the canonical JSON of ``content`` (sorted keys, no spaces)."""
    return hashlib.sha256(canonical_json(content).encode()).hexdigest()


def rank_dict(rank):
    return {"dp": rank.dp, "tp": rank.tp, "pp": rank.pp, "ep": rank.ep}
