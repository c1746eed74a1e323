"""mooncake.structured_object_store: codec inference and structure expansion (Mooncake's names)."""

import unittest

import numpy as np

from mooncake.structured_object_store import MISSING, _choose_leaf_codec, _escape_key, infer_structure

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


class CodecTest(unittest.TestCase):
    def check(self, values, accepted, codec):
        d = _choose_leaf_codec(values)
        self.assertEqual((d.accepted, d.codec), (accepted, codec), (values, d.reason))
        return d

    def test_codecs(self):
        self.check([[1, 2], [3.5]], True, "typed_ragged")
        self.assertEqual(self.check([[1, 2], [3.5]], True, "typed_ragged").metadata["dtype"], "float64")
        self.check([np.arange(3), None, np.zeros(2, dtype=np.float32)], True, "typed_ragged")
        self.check([np.array(["a"], dtype=object)], False, "msgpack_ragged")
        self.assertEqual(self.check([True, 2, None], True, "ndarray").metadata["dtype"], "int64")
        self.check([b"x", bytearray(b"y"), memoryview(b"z")], True, "bytes_ragged")
        self.check([[b"img", b"img2"], []], True, "media_list_ragged")
        self.check(["a", MISSING, None], True, "utf8_ragged")
        self.check([{"a": 1}, [1, "x"]], True, "msgpack_ragged")
        self.check([1, "a"], False, "msgpack_ragged")
        self.check([None, MISSING], False, "msgpack_ragged")

    @unittest.skipIf(torch is None, "torch not installed")
    def test_tensors(self):
        d = self.check([torch.zeros(2), torch.ones(3, 2)], True, "ragged_tensor")
        self.assertEqual(d.metadata, {"dtype": "torch.float32"})
        self.check([torch.zeros(2), torch.zeros(2, dtype=torch.int8)], False, "ragged_tensor")

    def test_structure(self):
        leaves, nodes = [], []
        rows = [{"a": {"b": 1}, "l": [{"k": "x"}], "c.d": None}, None, {"a": {"b": 2}, "l": []}]
        infer_structure("r", rows, leaves, nodes)
        self.assertEqual([(n.path, n.node_type) for n in nodes], [("r", "dict"), ("r.a", "dict"), ("r.l", "list"),
                                                                   ("r.l[0]", "dict")])
        self.assertEqual(nodes[0].row_mask, [True, False, True])
        self.assertEqual(nodes[0].children, ["a", "c.d", "l"])
        self.assertEqual(nodes[2].lengths, [1, 0, 0])
        by = {l.path: l for l in leaves}
        self.assertEqual(sorted(by), ["r.a.b", "r.c\\.d", "r.l[0].k"])
        self.assertEqual(by["r.l[0].k"].values, ["x", None, None])  # no container at r.l[0] in rows 2, 3
        self.assertIs(by["r.c\\.d"].values[2], MISSING)
        self.assertFalse(by["r.c\\.d"].decision.accepted)
        self.assertEqual(_escape_key("a\\.[b"), "a\\\\\\.\\[b")
        # long lists and wide dicts stay leaves; deep nesting is an error
        leaves, nodes = [], []
        infer_structure("r", [[{}] * 9], leaves, nodes)
        self.assertEqual((len(nodes), leaves[0].decision.codec), (0, "msgpack_ragged"))
        leaves, nodes = [], []
        infer_structure("r", [{str(i): i for i in range(65)}], leaves, nodes)
        self.assertEqual(len(nodes), 0)
        deep = 0
        for _ in range(34):
            deep = {"a": deep}
        with self.assertRaises(ValueError):
            infer_structure("r", [deep], [], [])


if __name__ == "__main__":
    unittest.main()
