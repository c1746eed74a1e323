"""mooncake.structured_object_store's bundle transfer: structured objects and DataProto stages,
over a dict-backed store (plain put/get/remove, no fast paths) and over a real store (our
master, the store's zero-copy calls and a BufferPool)."""

import ctypes
import json
import logging
import threading
import unittest

import numpy as np

import mooncake
from mooncake.store import MooncakeDistributedStore
from mooncake.structured_object_store import (BundleTransferPolicy, FieldSchema, MooncakeBundleTransfer,
                                              StructuredObjectPayload, export_dataproto_ref, import_dataproto_ref,
                                              raw_destination, tensor_object_buffer)

from _support import start_master

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

MIB = 1 << 20


class DictStore(object):
    """A store with only put/get/remove (every fast path absent), counting its calls."""

    def __init__(self, fail_put_on=None):
        self.objects = {}
        self.puts = 0
        self.fail_put_on = fail_put_on
        self.lock = threading.Lock()

    def put(self, key, value, config=None):
        with self.lock:
            self.puts += 1
            if self.puts == self.fail_put_on:
                return -1
            self.objects[key] = bytes(value)
        return 0

    def get(self, key):
        return self.objects[key]

    def remove(self, key, force=False):
        return 0 if self.objects.pop(key, None) is not None else -704


class DataProto(object):
    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch = batch or {}
        self.non_tensor_batch = non_tensor_batch or {}
        self.meta_info = meta_info or {}


def column(values):
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


class StructuredObjectTest(unittest.TestCase):
    def test_members_roundtrip_sliced_and_chunked(self):
        store = DictStore()
        t = MooncakeBundleTransfer(store, key_prefix="t", default_chunk_bytes=16)
        arr = np.arange(40, dtype=np.int32).reshape(10, 4)
        ref = t.put_structured_object(StructuredObjectPayload({"kind": "x"}, {"a": arr, "raw": b"hello"}))
        # 160 bytes of a in 16-byte chunks, plus manifest, metadata chunks and raw.
        self.assertEqual(len(ref.manifest["buffers"]["a"]["chunks"]), 10)
        out = t.materialize(t.read_spec(ref))
        self.assertEqual(out.metadata["kind"], "x")
        self.assertEqual(out.metadata["__mooncake_structured_fields__"]["a"],
                         {"encoding": "ndarray", "dtype": "<i4", "shape": [10, 4]})
        np.testing.assert_array_equal(out.objects["a"], arr)
        self.assertEqual(out.objects["raw"], b"hello")
        part = t.materialize(t.read_spec(ref).select_members(["a"]).slice_member("a", 0, 3, 9, 2))
        np.testing.assert_array_equal(part.objects["a"], arr[3:9:2])
        self.assertEqual(list(part.objects), ["a"])
        dst = np.empty((10, 4), dtype=np.int32)
        self.assertIs(t.materialize_into(t.read_spec(ref).select_members(["a"]), {"a": dst}).objects["a"], dst)
        np.testing.assert_array_equal(dst, arr)
        with self.assertRaisesRegex(ValueError, "dtype mismatch"):
            t.materialize_into(t.read_spec(ref).select_members(["a"]), {"a": np.empty((10, 4), np.int64)})
        with self.assertRaisesRegex(KeyError, "unknown bundle buffers"):
            t.materialize(t.read_spec(ref).select_members(["nope"]))
        t.remove_bundle(ref)
        self.assertEqual(store.objects, {})

    def test_failed_put_removes_what_it_wrote(self):
        store = DictStore(fail_put_on=3)
        t = MooncakeBundleTransfer(store, default_chunk_bytes=8)
        with self.assertRaisesRegex(RuntimeError, "put failed"):
            t.put_structured_object(StructuredObjectPayload({}, {"a": np.arange(8, dtype=np.int64)}))
        self.assertEqual(store.objects, {})

    def test_tampered_manifest_and_bad_arguments(self):
        store = DictStore()
        t = MooncakeBundleTransfer(store, key_prefix="t")
        ref = t.put_bundle(b"meta", {"x": b"abc"})
        manifest = json.loads(store.objects[ref.manifest_key])
        manifest["buffers"]["x"]["key"] = "elsewhere/key"
        store.objects[ref.manifest_key] = json.dumps(manifest).encode()
        with self.assertRaisesRegex(ValueError, "outside the bundle namespace"):
            t.materialize(t.read_spec({"manifest_key": ref.manifest_key}))
        with self.assertRaisesRegex(ValueError, "chunk_bytes must be positive"):
            MooncakeBundleTransfer(store, default_chunk_bytes=0)
        with self.assertRaisesRegex(ValueError, "unsupported put_mode"):
            t.put_bundle(b"", {}, policy=BundleTransferPolicy(put_mode="fast"))
        with self.assertRaisesRegex(ValueError, "invalid bundle partition"):
            t.put_bundle(b"", {}, partition="a/b")

    @unittest.skipIf(torch is None, "torch not installed")
    def test_object_and_tensor_members(self):
        store = DictStore()
        t = MooncakeBundleTransfer(store)
        tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        self.assertTrue(torch.equal(t.get_object(t.put_object(tensor)), tensor))
        ref = t.put_structured_object(StructuredObjectPayload({}, {"t": tensor}))
        self.assertEqual(ref.manifest["buffers"]["t"]["metadata_bytes"], 304)
        out = t.materialize(t.read_spec(ref).slice_member("t", 0, 1, 3))
        self.assertTrue(torch.equal(out.objects["t"], tensor[1:3]))


class DataProtoTest(unittest.TestCase):
    def test_fields_rows_stages_and_handles(self):
        store = DictStore()
        t = MooncakeBundleTransfer(store, key_prefix="rl")
        ids = np.arange(12, dtype=np.int64).reshape(4, 3)
        texts = column(["a", None, "ccc", "dd"])
        tokens = column([np.arange(2), np.arange(5), None, np.arange(1)])
        nested = column([{"k": 1, "v": [b"x"]}, {"k": 2, "v": []}, None, {"k": 4, "v": [b"y", b"z"]}])
        ref = t.put_dataproto(DataProto({"ids": ids}, {"text": texts, "tok": tokens, "nested": nested},
                                        {"step": 3}), namespace="n", stage="rollout")
        view = t.dataproto_manifest_view(ref)
        self.assertEqual(view["non_tensor_fields"]["text"]["spec"]["codec"], "utf8_ragged")
        self.assertEqual(view["non_tensor_fields"]["tok"]["spec"]["codec"], "typed_ragged")
        self.assertEqual(view["non_tensor_fields"]["nested"]["spec"]["codec"], "structured_recursive")
        ref = t.append_dataproto_fields(ref, {"batch": {"score": np.arange(4, dtype=np.float32)}}, stage="reward")
        with self.assertRaisesRegex(ValueError, "already exist"):
            t.append_dataproto_fields(ref, {"batch": {"ids": ids}}, stage="x")
        handle = json.loads(json.dumps(export_dataproto_ref(ref)))
        full = t.get_dataproto(handle)
        np.testing.assert_array_equal(full["batch"]["ids"], ids)
        self.assertEqual(full["non_tensor_batch"]["text"].tolist(), texts.tolist())
        self.assertEqual(full["non_tensor_batch"]["nested"].tolist(), nested.tolist())
        self.assertEqual(full["meta_info"], {"step": 3})
        for rows in ([3, 0, 3], slice(1, 3), []):
            sel = list(range(4))[rows] if isinstance(rows, slice) else rows
            got = t.get_dataproto(import_dataproto_ref(handle), fields=["ids", "text", "tok", "nested", "score"],
                                  rows=rows)
            np.testing.assert_array_equal(got["batch"]["ids"], ids[sel])
            np.testing.assert_array_equal(got["batch"]["score"], np.arange(4, dtype=np.float32)[sel])
            self.assertEqual(got["non_tensor_batch"]["text"].tolist(), [texts[i] for i in sel])
            self.assertEqual(got["non_tensor_batch"]["nested"].tolist(), [nested[i] for i in sel])
            for i, row in zip(sel, got["non_tensor_batch"]["tok"]):
                if tokens[i] is None:
                    self.assertIsNone(row)
                else:
                    np.testing.assert_array_equal(row, tokens[i])
        with self.assertRaises(IndexError):
            t.get_dataproto(ref, rows=[4])
        t.cleanup_dataproto(handle)
        self.assertEqual(store.objects, {})

    def test_flat_dict_and_schemas(self):
        t = MooncakeBundleTransfer(DictStore())
        data = {"x": np.ones((3, 2), dtype=np.float32), "labels": ["a", "b", "c"], "lr": 0.1,
                "lengths": [[1], [2, 2], []]}
        ref = t.put(data, type="dict", field_schemas={"lengths": FieldSchema("typed_ragged", metadata={"dtype": "int32"})})
        out = t.get(ref, type="dict")
        self.assertEqual(out["labels"], ["a", "b", "c"])
        self.assertEqual(out["lr"], 0.1)
        self.assertEqual([list(r) for r in out["lengths"]], [[1], [2, 2], []])
        with self.assertRaisesRegex(ValueError, "not nullable"):
            t.put({"batch": {"x": np.ones(2)}, "non_tensor_batch": {"y": column([1, None])}},
                  field_schemas={"y": FieldSchema("ndarray", nullable=False, metadata={"dtype": "int64"})})
        with self.assertRaisesRegex(ValueError, "inconsistent batch sizes"):
            t.put_dataproto(DataProto({"a": np.ones(2), "b": np.ones(3)}))


class _Owner(object):
    pass


class RealStoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.master, addr = start_master()
        cls.store = MooncakeDistributedStore()
        rc = cls.store.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MIB, 16 * MIB, "tcp", "", addr)
        if rc != 0:
            cls.master.stop()
            raise RuntimeError("setup failed: %d" % rc)

    @classmethod
    def tearDownClass(cls):
        cls.store.close()
        cls.master.stop(signal_first=True)
        logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def test_dataproto_through_the_store_fast_paths(self):
        pool = mooncake.BufferPool(self.store)
        t = MooncakeBundleTransfer(self.store, key_prefix="real", default_chunk_bytes=64 << 10, buffer_pool=pool)
        ids = np.arange(64 * 1024, dtype=np.int64).reshape(256, 256)  # 512 KiB: 8 chunks
        rows = column([np.arange(i % 7, dtype=np.int32) for i in range(256)])
        batch = {"ids": ids}
        if torch is not None:
            batch["h"] = torch.arange(256 * 4, dtype=torch.float32).reshape(256, 4)
        ref = t.put_dataproto(DataProto(batch, {"rows": rows}), policy=BundleTransferPolicy(max_inflight_put=4))
        self.assertEqual(len(ref.stage_refs["default"].manifest["buffers"]["batch.ids"]["chunks"]), 8)
        got = t.get_dataproto(ref, rows=slice(100, 200))
        np.testing.assert_array_equal(got["batch"]["ids"], ids[100:200])
        for want, row in zip(rows[100:200], got["non_tensor_batch"]["rows"]):
            np.testing.assert_array_equal(row, want)
        if torch is not None:
            self.assertTrue(torch.equal(got["batch"]["h"], batch["h"][100:200]))
            got = t.get_dataproto(ref, batch_fields=["h"], rows=[5, 250])
            self.assertTrue(torch.equal(got["batch"]["h"], batch["h"][[5, 250]]))
        t.release_result(got)
        dst = np.zeros(256 * 256, dtype=np.int64)
        owner = _Owner()
        out = t.get_dataproto(ref, batch_fields=["ids"],
                              destinations={"ids": raw_destination(dst.ctypes.data, dst.nbytes, owner)})
        np.testing.assert_array_equal(out["batch"]["ids"], ids)
        np.testing.assert_array_equal(dst.reshape(256, 256), ids)
        keys = [c["key"] for spec in ref.stage_refs["default"].manifest["buffers"].values() for c in spec["chunks"]]
        t.cleanup_dataproto(ref)
        self.assertFalse(any(self.store.is_exist(k) == 1 for k in keys))
        pool.close()

    @unittest.skipIf(torch is None, "torch not installed")
    def test_tensor_object_buffer_zero_copy(self):
        pool = mooncake.BufferPool(self.store)
        t = MooncakeBundleTransfer(self.store, key_prefix="zc", buffer_pool=pool)
        tensor = torch.arange(12, dtype=torch.int64).reshape(3, 4)
        header, ptr, nbytes, _owner = mooncake.store._serialize_tensor(tensor)
        lease = pool.acquire(len(header) + nbytes)
        view = lease.buffer
        view[:len(header)] = header
        view.release()  # a released view does not hold the lease
        ctypes.memmove(lease.ptr + len(header), ptr, nbytes)
        ref = t.put_structured_object(
            StructuredObjectPayload(buffers={"t": tensor_object_buffer(lease.ptr, len(header) + nbytes, lease, 3)}),
            policy=BundleTransferPolicy(copy_mode="zero_copy"))
        self.assertTrue(torch.equal(t.materialize(t.read_spec(ref)).objects["t"], tensor))
        with self.assertRaisesRegex(ValueError, "tensor-object buffer"):
            t.put_structured_object(StructuredObjectPayload(buffers={"t": tensor}),
                                    policy=BundleTransferPolicy(copy_mode="zero_copy"))
        t.remove_bundle(ref)
        lease.release()
        pool.close()


if __name__ == "__main__":
    unittest.main()
