"""Smaller modules of Mooncake's surface: _fast_copy, dataproto_catalog and the DataProto ref
handles, mooncake_connector_v1's vLLM-free parts, the tool modules."""

import contextlib
import ctypes
import io
import json
import logging
import unittest

import numpy as np

from mooncake import _fast_copy, cli_bench, cli_client, mooncake_connector_v1 as mc1  # noqa: F401
from mooncake import structured_object_store as sos, transfer_engine_topology_dump as topo
from mooncake.dataproto_catalog import DataProtoCatalog


def handle(name, fields, rows=2, **extra):
    h = {"type": "mooncake_dataproto_ref", "version": 1, "kind": "bundle_stages", "batch_size": rows,
         "stage_refs": {"s": {"manifest_key": "m/" + name}},
         "field_index": {f: {"stage": "s", "member": "batch." + f, "section": "batch"} for f in fields}}
    h.update(extra)
    return h


class FastCopyTest(unittest.TestCase):
    def test_copies_ranges_with_threads(self):
        rng = np.random.default_rng(1)
        arrays = [rng.integers(0, 255, n, dtype=np.uint8) for n in (0, 7, 1 << 16, 3, 1 << 20, 0, 5)]
        want = np.concatenate(arrays[1:6]).tobytes()
        for threads in (1, 2, 8):
            dst = ctypes.create_string_buffer(len(want) + 9)
            n = _fast_copy.concat_arrays_into(arrays, ctypes.addressof(dst), len(dst), 1, 5, threads)
            self.assertEqual(n, len(want))
            self.assertEqual(dst.raw[:n], want)

    def test_errors_before_any_write(self):
        dst = ctypes.create_string_buffer(b"\x01" * 8)
        with self.assertRaisesRegex(ValueError, "too small"):
            _fast_copy.concat_arrays_into([np.zeros(5, np.uint8), np.zeros(5, np.uint8)], ctypes.addressof(dst), 8)
        self.assertEqual(dst.raw[:8], b"\x01" * 8)
        with self.assertRaises(TypeError):
            _fast_copy.concat_arrays_into([b"abc"], ctypes.addressof(dst), 8)
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            _fast_copy.concat_arrays_into([np.arange(8, dtype=np.uint8)[::2]], ctypes.addressof(dst), 8)
        self.assertEqual(_fast_copy.concat_arrays_into([np.zeros(3)], ctypes.addressof(dst), 8, 1, 5), 0)


class DataProtoTest(unittest.TestCase):
    def test_ref_handle_roundtrip_and_rejections(self):
        ref = sos.import_dataproto_ref(handle("a", ["x", "y"], global_indexes=[3, 4], meta_info={"k": 1},
                                              storage_group_id="g"))
        self.assertEqual((ref.batch_size, ref.global_indexes, ref._storage_group_id), (2, [3, 4], "g"))
        self.assertEqual(ref.field_index["y"], sos.StructuredFieldLocation("s", "batch.y", "batch"))
        out = sos.export_ref(ref)
        json.dumps(out)
        self.assertEqual(sos.import_ref(out), ref)
        self.assertTrue(sos.is_dataproto_ref_handle(out))
        bad = [dict(handle("a", ["x"]), version=9), dict(handle("a", ["x"]), kind="other"),
               dict(handle("a", ["x"]), version=2), dict(handle("a", ["x"]), global_indexes=[True]),
               {"type": "other"}]
        for h in bad:
            with self.assertRaises(ValueError):
                sos.import_dataproto_ref(h)
        h = handle("a", ["x"])
        h["field_index"]["x"]["stage"] = "nope"
        with self.assertRaisesRegex(ValueError, "unknown stage"):
            sos.import_dataproto_ref(h)
        spec = sos.StructuredObjectReadSpec(ref="r").select_members(["a"]).slice_member("a", 0, 1, 5)
        self.assertEqual((spec.member_names, spec.member_slice("a").end), (("a",), 5))

    def test_catalog_fragments_and_refcounts(self):
        c = DataProtoCatalog()
        c.update("p", ["a", "b"], tags=[{"t": 1}, {"t": 2}], handle=handle("one", ["x", "y"]))
        c.update("p", ["b"], tags=[{"u": 3}], handle=handle("two", ["y"], rows=1))
        plan = c.resolve("p", ["a", "b"])
        self.assertEqual(plan["fields"], ["x", "y"])
        self.assertEqual(plan["field_groups"], [
            {"fields": ["x"], "locations": [("m/one", 0), ("m/one", 1)]},
            {"fields": ["y"], "locations": [("m/one", 0), ("m/two", 0)]}])
        self.assertEqual(plan["tags"], [{"t": 1}, {"t": 2, "u": 3}])
        with self.assertRaisesRegex(ValueError, "collision"):
            c.update("p", ["a"], handle=handle("two", ["z"], rows=1))
        self.assertEqual(c.list("p")["p"]["b"], {"t": 2, "u": 3})  # the failed update changed nothing
        c.remove("p", ["b"])
        self.assertNotIn("m/two", c._fragments)
        c.remove("p", ["a"])
        self.assertEqual((c.list(), c._fragments, c._refs), ({}, {}, {}))
        with self.assertRaisesRegex(ValueError, "requires tags"):
            c.update("p", ["a"])


class ConnectorV1Test(unittest.TestCase):
    def test_vllm_free_parts(self):
        self.assertEqual(mc1.group_concurrent_contiguous([1, 2, 3, 7, 8], [4, 5, 9, 10, 11]),
                         ([[1, 2], [3], [7, 8]], [[4, 5], [9], [10, 11]]))
        self.assertEqual(mc1.group_concurrent_contiguous([], []), ([], []))
        md = mc1.MooncakeConnectorMetadata()
        md.add_new_req("r1", [1, 2], {"remote_host": "h", "remote_port": 5, "remote_request_id": "x"})
        md.add_new_req("r2", [3], {}, load_remote_cache=False)
        self.assertEqual(md.reqs_to_recv["r1"], mc1.RecvReqMeta([1, 2], "h", 5, "x"))
        self.assertEqual(md.reqs_to_send, {"r2": [3]})

        class P(object):
            data_parallel_rank, tensor_parallel_size = 2, 4

        class C(object):
            parallel_config = P()

        self.assertEqual(mc1.get_mooncake_side_channel_port(C()), mc1.VLLM_MOONCAKE_SIDE_CHANNEL_PORT + 8)

    @unittest.skipIf(mc1._vllm_mc is not None, "vLLM is installed")
    def test_connector_needs_vllm(self):
        with self.assertRaisesRegex(ImportError, "needs vLLM"):
            mc1.MooncakeConnector(None, None)


class NumaTest(unittest.TestCase):
    def test_bind_thread(self):
        import os
        import threading

        from mooncake import _numa, store

        nodes = _numa.nodes()
        if not nodes:
            self.skipTest("no NUMA nodes in /sys")
        node, got = nodes[-1], {}

        def run():  # in a thread of its own: the binding is per thread
            logging.getLogger("mooncake").setLevel(logging.CRITICAL)
            store.bind_to_numa_node(node)
            got["cpus"], got["pref"] = os.sched_getaffinity(0), _numa.preferred_node()
            store.bind_to_numa_node(max(nodes) + 1)  # out of range: a warning, nothing changes
            got["after"] = os.sched_getaffinity(0)

        t = threading.Thread(target=run)
        t.start()
        t.join(30)
        self.assertEqual(got["cpus"], _numa.node_cpus(node))
        self.assertEqual(got["after"], got["cpus"])
        if _numa._syscall(1) is not None:
            self.assertEqual(got["pref"], node)
        self.assertEqual(_numa.parse_cpulist("0-3,8,10-11\n"), {0, 1, 2, 3, 8, 10, 11})


class ToolModulesTest(unittest.TestCase):
    def test_nvmeof_modules_say_why(self):
        for name in ("mooncake_ssd_register", "mooncake_ssd_unregister", "spdk_tgt_create"):
            with self.assertRaisesRegex(ImportError, "NVMe-oF"):
                __import__("mooncake." + name)

    def test_allocator_says_why(self):
        with self.assertRaisesRegex(ImportError, "NVLink"):
            __import__("mooncake.allocator")

    def test_topology_dump(self):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        for backend in ("te", "tent"):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(topo.main(["--backend", backend]), 0)
            text = out.getvalue()
            self.assertTrue(text.startswith("Local topology [%s/discover]: " % backend), text)
            self.assertIn("rpc_port", json.loads(text.split(": ", 1)[1]))


if __name__ == "__main__":
    unittest.main()
