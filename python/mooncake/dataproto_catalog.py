"""mooncake.dataproto_catalog: Mooncake's catalog of logical rows over DataProto refs.

A ``DataProtoCatalog`` maps (partition, key) rows to tags (merged dicts) and, per field, to
the location of that field's value: a row of an immutable single-stage DataProto fragment
(``(manifest_key, row)``). ``update`` merges tags and publishes every field of a handle
(``mooncake.structured_object_store.export_dataproto_ref``) for the keys given, in order;
``resolve`` turns an ordered read of keys and fields into field groups that share
fragment locations plus the handles needed; ``list`` returns the tags; ``remove`` forgets
keys. Fragments are reference-counted by the (key, field) entries that point at them and
dropped with the last one. Only metadata is kept: the data and its lifetime stay with the
store. Calls on one catalog must be serialized by its owner (as in Mooncake). A call that
fails changes nothing.
"""

import copy
from collections.abc import Mapping

__all__ = ["DataProtoCatalog"]


def _string(value, what):
    if not isinstance(value, str) or not value:
        raise ValueError("%s must be a non-empty string" % what)
    return value


def _names(values, what):
    if isinstance(values, str):
        raise ValueError("%s must be a sequence of non-empty strings" % what)
    out = tuple(values)
    if not out or not all(isinstance(v, str) and v for v in out):
        raise ValueError("%s must be non-empty strings" % what)
    if len(set(out)) != len(out):
        raise ValueError("%s must be unique" % what)
    return out


def _normalize_tags(tags, count):
    if tags is None:
        return None
    if len(tags) != count:
        raise ValueError("tags must have the same length as keys")
    if not all(isinstance(t, Mapping) for t in tags):
        raise TypeError("tags must be mappings")
    return [copy.deepcopy(dict(t)) for t in tags]


def _fragment_of(handle, rows):
    """(fragment id, stored handle, field names) of a single-stage handle for rows keys."""
    from .structured_object_store import export_dataproto_ref, import_dataproto_ref

    ref = import_dataproto_ref(handle)
    if ref.batch_size != rows:
        raise ValueError("DataProto batch size %r does not match %d logical keys" % (ref.batch_size, rows))
    if len(ref.stage_refs) != 1:
        raise ValueError("catalog fragments must contain exactly one DataProto stage")
    (stage,) = ref.stage_refs.values()
    fragment_id = _string(stage.manifest_key, "manifest_key")
    fields = _names(ref.field_index, "field names")
    return fragment_id, export_dataproto_ref(ref), fields


def _fields_of(entries, keys):
    seen = {}
    for key in keys:
        for f in entries[key]["fields"]:
            seen.setdefault(f, None)
    return list(seen)


class DataProtoCatalog(object):
    def __init__(self):
        self._partitions = {}  # partition -> key -> {"tag": dict, "fields": {field: (fragment, row)}}
        self._fragments = {}  # fragment id -> exported handle
        self._refs = {}  # fragment id -> number of (key, field) entries pointing at it

    def update(self, partition, keys, *, tags=None, handle=None):
        partition = _string(partition, "partition")
        keys = _names(keys, "keys")
        new_tags = _normalize_tags(tags, len(keys))
        fragment = _fragment_of(handle, len(keys)) if handle is not None else None
        if new_tags is None and fragment is None:
            raise ValueError("catalog update requires tags or a DataProto handle")
        if fragment is not None:
            fid, stored, fields = fragment
            known = self._fragments.get(fid)
            if known is not None and known != stored:
                raise ValueError("DataProto fragment id collision: %r" % (fid,))
        # Everything is checked: apply.
        entries = self._partitions.setdefault(partition, {})
        answer_tags = []
        for row, key in enumerate(keys):
            entry = entries.setdefault(key, {"tag": {}, "fields": {}})
            if new_tags is not None:
                entry["tag"].update(new_tags[row])
            answer_tags.append(copy.deepcopy(entry["tag"]))
            if fragment is None:
                continue
            if fid not in self._fragments:
                self._fragments[fid] = stored
                self._refs[fid] = 0
            for f in fields:
                old = entry["fields"].get(f)
                entry["fields"][f] = (fid, row)
                if old is not None and old[0] == fid:
                    continue  # same fragment: its count already holds this entry
                if old is not None:
                    self._release(old[0])
                self._refs[fid] += 1
        return {"keys": list(keys), "tags": answer_tags, "fields": _fields_of(entries, keys)}

    def resolve(self, partition, keys, fields=None):
        partition = _string(partition, "partition")
        keys = _names(keys, "keys")
        entries = self._partitions.get(partition, {})
        missing = [k for k in keys if k not in entries]
        if missing:
            raise ValueError("keys were not found in partition %r: %s" % (partition, missing))
        selected = list(_names(fields, "field names")) if fields is not None else _fields_of(entries, keys)
        if not selected:
            raise ValueError("requested keys do not contain any fields")
        for k in keys:
            absent = [f for f in selected if f not in entries[k]["fields"]]
            if absent:
                raise ValueError("fields are not ready for key %r: %s" % (k, absent))
        groups = {}
        used = set()
        for f in selected:
            locations = tuple(entries[k]["fields"][f] for k in keys)
            groups.setdefault(locations, []).append(f)
            used.update(loc[0] for loc in locations)
        return {
            "keys": list(keys),
            "tags": [copy.deepcopy(entries[k]["tag"]) for k in keys],
            "fields": selected,
            "field_groups": [{"fields": fs, "locations": list(locs)} for locs, fs in groups.items()],
            "handles": {fid: copy.deepcopy(self._fragments[fid]) for fid in used},
        }

    def list(self, partition=None):
        if partition is not None:
            partition = _string(partition, "partition")
            names = [partition] if partition in self._partitions else []
        else:
            names = list(self._partitions)
        return {p: {k: copy.deepcopy(e["tag"]) for k, e in self._partitions[p].items()} for p in names}

    def remove(self, partition, keys):
        partition = _string(partition, "partition")
        keys = _names(keys, "keys")
        entries = self._partitions.get(partition)
        if entries is None:
            return
        for k in keys:
            entry = entries.pop(k, None)
            if entry is None:
                continue
            for fid, _row in entry["fields"].values():
                self._release(fid)
        if not entries:
            del self._partitions[partition]

    def _release(self, fid):
        self._refs[fid] -= 1
        if self._refs[fid] == 0:
            del self._refs[fid]
            del self._fragments[fid]
