"""mooncake.reshard.weight: placement manifests, their JSON form, bindings and the logical planner.

The planner tests execute each plan on real bytes: every source fragment is a contiguous row-major
slice of one numpy tensor, the plan's segments are copied into zeroed target buffers, and every
target fragment must then equal its slice of the tensor.
"""

import json
import pickle
import unittest
from itertools import product
from math import prod

import numpy as np

from mooncake.reshard.weight import (OwnershipAxis, ParallelRank, ParallelTopology, PlacementFragment,
                                     PlanningLimits, ReplicatedAxis, RuntimeBindingFragment, SplitAxis,
                                     StoredFragment, TensorDescriptor, TopologyParticipant, WeightManifest,
                                     WeightPlacementManifest, WeightRuntimeBindingManifest,
                                     plan_placement_transfer, plan_placement_transfer_to_local_target,
                                     plan_stored_transfer_to_target_placement, validate_runtime_binding,
                                     validate_runtime_bindings, weight_placement_from_json,
                                     weight_placement_to_json)

SHAPE = (8, 6)
TENSOR = TensorDescriptor(tensor_id="layers.0.w", global_shape=SHAPE, dtype="float32", itemsize=4, shard_dims=(1,),
                          layout_fingerprint="test:f32:v1",
                          parallel_axes=(ReplicatedAxis("dp"), SplitAxis(kind="tp", dim=1)))
VALUES = np.arange(prod(SHAPE), dtype=np.float32).reshape(SHAPE)


def tp_placement(tp, dp=1, name="p", dim=1, tensor=TENSOR):
    """The tensor split along ``dim`` over ``tp`` ranks, replicated on ``dp`` ranks."""
    step = tensor.global_shape[dim] // tp
    fragments, participants = [], []
    for d, t in product(range(dp), range(tp)):
        rank = ParallelRank(dp=d, tp=t)
        offset, shape = [0, 0], list(tensor.global_shape)
        offset[dim], shape[dim] = t * step, step
        fragments.append(PlacementFragment(tensor_id=tensor.tensor_id, global_offset=tuple(offset),
                                           local_shape=tuple(shape), nbytes=prod(shape) * tensor.itemsize, rank=rank))
        participants.append(TopologyParticipant("%s-d%d-t%d" % (name, d, t), rank))
    topology = ParallelTopology(tp_size=tp, pp_size=1, ep_size=1, dp_size=dp, participants=tuple(participants))
    return WeightPlacementManifest.from_fragments(resource_id="model", revision="r1", weight_generation=3,
                                                  placement_set_id=name, topology=topology, tensors=(tensor,),
                                                  fragments=tuple(fragments))


def box(fragment):
    return VALUES[tuple(slice(o, o + n) for o, n in zip(fragment.global_offset, fragment.local_shape))]


def execute(plan):
    """Copy the plan's segments between real buffers; returns target fragment id -> array."""
    targets = {}
    for op in plan.operations:
        src = np.ascontiguousarray(box(op.source)).view(np.uint8).reshape(-1)
        dst = targets.setdefault(op.target.fragment_id,
                                 (op.target, np.zeros(op.target.nbytes, dtype=np.uint8)))[1]
        for s, t, n in op.iter_segments(max_segments=1 << 20):
            dst[t:t + n] = src[s:s + n]
    return {fid: buf.view(np.float32).reshape(frag.local_shape) for fid, (frag, buf) in targets.items()}


class PlacementTest(unittest.TestCase):
    def test_identity_and_json_round_trip(self):
        placement = tp_placement(2)
        self.assertTrue(placement.placement_id.startswith("sha256:"))
        self.assertEqual(len(placement.digest), 64)
        self.assertEqual(placement.topology.world_size, 2)
        text = weight_placement_to_json(placement)
        again = weight_placement_from_json(text)
        self.assertEqual(again, placement)
        self.assertEqual(weight_placement_to_json(again), text)
        self.assertEqual(again.digest, placement.digest)
        self.assertNotEqual(tp_placement(2, name="other").placement_id, placement.placement_id)
        payload = json.loads(text)
        payload["tensors"][0]["alias"] = "x"
        with self.assertRaisesRegex(ValueError, "schema fields"):
            weight_placement_from_json(json.dumps(payload))
        with self.assertRaisesRegex(ValueError, "duplicate JSON field"):
            weight_placement_from_json('{"resource_id": "a", "resource_id": "b"}')
        payload = json.loads(text)
        payload["placement_id"] = "sha256:" + "0" * 64
        with self.assertRaisesRegex(ValueError, "placement_id does not match"):
            weight_placement_from_json(json.dumps(payload))

    def test_incomplete_placements_are_refused(self):
        placement = tp_placement(2)
        with self.assertRaisesRegex(ValueError, "missing topology participant"):
            WeightPlacementManifest(resource_id="model", revision="r1", weight_generation=3, placement_set_id="p",
                                    topology=placement.topology, parts=placement.parts[:1])
        half = placement.fragments[:1]
        topology = ParallelTopology(tp_size=2, pp_size=1, ep_size=1, dp_size=1,
                                    participants=(TopologyParticipant("w0", half[0].rank),))
        with self.assertRaisesRegex(ValueError, "not fully covered"):
            WeightPlacementManifest.from_fragments(resource_id="model", revision="r1", weight_generation=3,
                                                   placement_set_id="p", topology=topology, tensors=(TENSOR,),
                                                   fragments=half)
        whole = ParallelTopology(tp_size=1, pp_size=1, ep_size=1, dp_size=1,
                                 participants=(TopologyParticipant("w", ParallelRank()),))
        with self.assertRaisesRegex(ValueError, "byte size mismatch"):
            WeightPlacementManifest.from_fragments(
                resource_id="model", revision="r1", weight_generation=3, placement_set_id="p", topology=whole,
                tensors=(TENSOR,), fragments=(PlacementFragment(tensor_id=TENSOR.tensor_id, global_offset=(0, 0),
                                                                local_shape=SHAPE, nbytes=4, rank=ParallelRank()),))
        with self.assertRaisesRegex(ValueError, "integer"):
            ParallelRank(tp=True)

    def test_runtime_bindings(self):
        placement = tp_placement(2)
        bindings = []
        for i, part in enumerate(placement.parts):
            (frag,) = part.fragments
            address = 0x10000 * (i + 1)
            bindings.append(WeightRuntimeBindingManifest(
                resource_id="model", placement_id=placement.placement_id, placement_digest=placement.digest,
                instance_id="inst", generation=1, lease_id="lease", revision="r1",
                participant_id=part.participant_id,
                fragments=(RuntimeBindingFragment(
                    placement_fragment_id=frag.placement_fragment_id, fragment_id="rt-%d" % i, address=address,
                    nbytes=frag.nbytes, worker_id="w", endpoint="w:1", device="cpu", itemsize=4,
                    local_shape=frag.local_shape, strides_bytes=(frag.local_shape[1] * 4, 4),
                    storage_address=address, storage_nbytes=frag.nbytes, storage_offset_bytes=0),)))
        validate_runtime_bindings(placement, bindings)
        with self.assertRaisesRegex(ValueError, "missing runtime binding participant"):
            validate_runtime_bindings(placement, bindings[:1])
        stale = tp_placement(2, name="moved")
        with self.assertRaises(ValueError):
            validate_runtime_binding(stale, bindings[0])


class PlannerTest(unittest.TestCase):
    def check_copies(self, plan, target):
        out = execute(plan)
        self.assertEqual(set(out), {f.fragment_id for f in target.fragments})
        for frag in target.fragments:
            np.testing.assert_array_equal(out[frag.fragment_id], box(frag))

    def test_tp_split_merge_and_dim_change(self):
        # (source TP, target TP, target split dimension): split, merge, and rows to columns
        for src_tp, dst_tp, dst_dim in ((2, 3, 1), (3, 1, 1), (2, 4, 0), (1, 2, 0)):
            source = tp_placement(src_tp, name="src")
            tensor = TENSOR if dst_dim == 1 else TensorDescriptor(
                tensor_id=TENSOR.tensor_id, global_shape=SHAPE, dtype="float32", itemsize=4, shard_dims=(0,),
                layout_fingerprint="test:f32:v1", parallel_axes=(ReplicatedAxis("dp"), SplitAxis(kind="tp", dim=0)))
            target = tp_placement(dst_tp, name="dst", dim=dst_dim, tensor=tensor)
            plan = plan_placement_transfer(source, target)
            self.assertEqual(plan.total_bytes, prod(SHAPE) * 4)
            self.check_copies(plan, target)
            for op in plan.operations:  # compact: a column split is one strided region, not a row per copy
                self.assertLessEqual(len(op.outer_loop_counts), 1)
            self.assertEqual(pickle.loads(pickle.dumps(plan)), plan)

    def test_dp_replicas_local_target_and_limits(self):
        source = tp_placement(2, dp=2, name="src")
        target = tp_placement(3, dp=2, name="dst")
        plan = plan_placement_transfer(source, target)
        self.check_copies(plan, target)
        # each target DP rank reads from one complete source replica
        for op in plan.operations:
            self.assertEqual(op.source.rank.dp, op.target.rank.dp)
        local = plan_placement_transfer_to_local_target(source, target, "dst-d1-t2")
        self.assertEqual([e.participant_id for e in local.target_executors], ["dst-d1-t2"])
        self.assertEqual({op.target.rank for op in local.operations}, {ParallelRank(dp=1, tp=2)})
        with self.assertRaisesRegex(ValueError, "max_transfer_regions"):
            plan_placement_transfer(source, target, planning_limits=PlanningLimits(max_transfer_regions=2))
        with self.assertRaisesRegex(ValueError, "unknown target participant"):
            plan_placement_transfer_to_local_target(source, target, "nobody")

    def test_mismatched_descriptors_are_refused(self):
        other = TensorDescriptor(tensor_id=TENSOR.tensor_id, global_shape=SHAPE, dtype="float32", itemsize=4,
                                 shard_dims=(1,), layout_fingerprint="test:f32:v2",
                                 parallel_axes=TENSOR.parallel_axes)
        with self.assertRaisesRegex(ValueError, "layout mismatch"):
            plan_placement_transfer(tp_placement(2), tp_placement(2, tensor=other))

    def test_stored_source(self):
        half = SHAPE[0] // 2
        fragments = tuple(StoredFragment(fragment_id="f%d" % i, tensor_id=TENSOR.tensor_id,
                                         global_offset=(i * half, 0), local_shape=(half, SHAPE[1]),
                                         object_key="g/payload/0", object_offset=i * half * SHAPE[1] * 4,
                                         nbytes=half * SHAPE[1] * 4) for i in range(2))
        manifest = WeightManifest(namespace="ns", resource_id="model", revision="r1", weight_generation=3,
                                  group_id="g", manifest_key="g/manifest", tensors=(TENSOR,), fragments=fragments,
                                  created_at="2026-01-01T00:00:00Z")
        self.assertEqual(WeightManifest.from_json(manifest.to_json()), manifest)
        target = tp_placement(3, name="dst")
        plan = plan_stored_transfer_to_target_placement(manifest, target)
        self.assertEqual(plan.source_manifest_identity.content_sha256, manifest.manifest_digest)
        self.check_copies(plan, target)
        with self.assertRaisesRegex(ValueError, "object ranges overlap"):
            WeightManifest(namespace="ns", resource_id="model", revision="r1", weight_generation=3, group_id="g",
                           manifest_key="g/manifest", tensors=(TENSOR,),
                           fragments=(fragments[0], StoredFragment(
                               fragment_id="f1", tensor_id=TENSOR.tensor_id, global_offset=(half, 0),
                               local_shape=(half, SHAPE[1]), object_key="g/payload/0", object_offset=4,
                               nbytes=half * SHAPE[1] * 4)), created_at="t")


if __name__ == "__main__":
    unittest.main()
