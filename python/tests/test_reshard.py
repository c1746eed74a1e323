"""mooncake.reshard: the resource-neutral contracts and the N-D box geometry."""

import pickle
import random
import unittest
from types import SimpleNamespace

from mooncake import reshard
from mooncake.reshard import geometry
from mooncake.reshard._compat import _strict_zip
from mooncake.reshard.contracts import ResourceKind, RuntimeBindingFragment, validate_resource_binding_identity


def brute_overlap(boxes):
    return any(all(a < b + bn and b < a + an for a, an, b, bn in zip(o1, s1, o2, s2))
               for i, (o1, s1) in enumerate(boxes) for o2, s2 in boxes[i + 1:])


class GeometryTest(unittest.TestCase):
    def test_overlap_matches_brute_force(self):
        rng = random.Random(7)
        for _ in range(600):
            ndim = rng.randint(1, 3)
            boxes = tuple((tuple(rng.randint(0, 6) for _ in range(ndim)), tuple(rng.randint(1, 4) for _ in range(ndim)))
                          for _ in range(rng.randint(0, 8)))
            self.assertIs(geometry.boxes_overlap(boxes), brute_overlap(boxes), boxes)

    def test_exact_cover(self):
        # a 4x6 box at (8, 4) cut into a 1x6 row, a 3x2 block and a 3x4 block
        tiles = (((8, 4), (1, 6)), ((9, 4), (3, 2)), ((9, 6), (3, 4)))
        self.assertTrue(geometry.boxes_exactly_cover((8, 4), (4, 6), tiles))
        self.assertFalse(geometry.boxes_exactly_cover((8, 4), (4, 6), tiles[:2]))  # a hole
        self.assertFalse(geometry.boxes_exactly_cover((8, 4), (4, 6), tiles[:2] + (((9, 5), (3, 5)),)))  # overlap
        self.assertFalse(geometry.boxes_exactly_cover((8, 4), (4, 6), ()))
        target = SimpleNamespace(global_offset=(0,), local_shape=(4,))
        regions = [SimpleNamespace(overlap_offset=(0,), overlap_shape=(2,)),
                   SimpleNamespace(overlap_offset=(2,), overlap_shape=(2,))]
        self.assertTrue(geometry.regions_exactly_cover(target, regions))

    def test_high_dimensional_budget(self):
        boxes = tuple(((0, i, 0), (2, 1, 1)) for i in range(3)) + (((1, 0, 0), (1, 1, 1)),)
        self.assertTrue(geometry.boxes_overlap(boxes))
        old = geometry._MAX_HIGH_DIMENSIONAL_PAIRWISE_COMPARISONS
        geometry._MAX_HIGH_DIMENSIONAL_PAIRWISE_COMPARISONS = 0
        try:
            with self.assertRaisesRegex(ValueError, "budget"):
                geometry.boxes_overlap(boxes)
        finally:
            geometry._MAX_HIGH_DIMENSIONAL_PAIRWISE_COMPARISONS = old


class ContractsTest(unittest.TestCase):
    def test_surface(self):
        self.assertEqual(reshard.__all__, ["ResourceKind", "ResourceManifest", "PlacementManifest",
                                           "RuntimeBindingManifest"])
        self.assertEqual(ResourceKind.KV_CACHE.value, "kv_cache")
        self.assertEqual(list(_strict_zip((1, 2), "ab")), [(1, "a"), (2, "b")])
        with self.assertRaisesRegex(ValueError, "different lengths"):
            list(_strict_zip((1,), (2, 3)))

    def fragment(self, **kw):
        args = dict(placement_fragment_id="p", fragment_id="f", address=4096 + 64, nbytes=64, worker_id="w",
                    endpoint="e", device="cpu", itemsize=4, local_shape=(1, 16), strides_bytes=(0, 4),
                    storage_address=4096, storage_nbytes=256, storage_offset_bytes=64, owner=object())
        args.update(kw)
        return RuntimeBindingFragment(**args)

    def test_runtime_fragment(self):
        f = self.fragment()
        self.assertEqual(f.strides_bytes, (64, 4))  # the extent-1 stride normalized
        g = pickle.loads(pickle.dumps(f))
        self.assertEqual(g, f)
        self.assertIsNone(g.owner)
        for kw, msg in (({"worker_id": ""}, "non-empty"), ({"strides_bytes": (4, 0)}, "positive"),
                        ({"address": 4096}, "storage_address plus"), ({"storage_nbytes": 100}, "bounds"),
                        ({"local_shape": (16,)}, "rank"), ({"nbytes": True}, "integer")):
            with self.assertRaisesRegex(ValueError, msg):
                self.fragment(**kw)

    def test_binding_identity(self):
        placement = SimpleNamespace(resource_kind=ResourceKind.MODEL_WEIGHT, resource_id="m", placement_id="p",
                                    digest="d")
        binding = SimpleNamespace(resource_kind=ResourceKind.MODEL_WEIGHT, resource_id="m", placement_id="p",
                                  placement_digest="d")
        validate_resource_binding_identity(placement, binding)
        binding.placement_digest = "x"
        with self.assertRaisesRegex(ValueError, "digest"):
            validate_resource_binding_identity(placement, binding)


if __name__ == "__main__":
    unittest.main()
