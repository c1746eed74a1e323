"""mooncake.reshard: Mooncake's framework-neutral resharding contracts and model-weight planner.

Mooncake's ``mooncake-reshard`` package describes reusable runtime resources (model weights;
KV caches reserved) as typed manifests and plans their N-D resharding. Here:

- ``mooncake.reshard.contracts``: the resource-neutral contracts, ``ResourceKind``, the
  structural ``ResourceManifest``/``PlacementManifest``/``RuntimeBindingManifest``/
  ``StoredResourceManifest`` protocols, the identity types, ``RuntimeBindingFragment`` (one
  contiguous physical view of a logical fragment, checked on construction) and
  ``validate_resource_binding_identity``;
- ``mooncake.reshard.geometry``: N-D logical boxes (``box_contains``, ``boxes_overlap``,
  ``boxes_exactly_cover``, ``regions_exactly_cover``);
- ``mooncake.reshard.weight``: the model-weight specialization: ``TensorDescriptor`` with its
  split/replicated/ownership axes, ``ParallelTopology``, per-participant ``WeightPlacementPart``
  assembled into a complete ``WeightPlacementManifest`` (canonical ``placement_id`` and digest,
  strict JSON form), ``WeightRuntimeBindingManifest`` checks, the committed Store snapshot
  ``WeightManifest``, and the address-free planner (``plan_placement_transfer``,
  ``plan_placement_transfer_to_local_target``, ``plan_stored_transfer_to_target_placement``)
  that yields a ``LogicalTransferPlan`` of compact strided N-D ``TransferRegion`` values.
"""

from .contracts import PlacementManifest, ResourceKind, ResourceManifest, RuntimeBindingManifest

__all__ = ["ResourceKind", "ResourceManifest", "PlacementManifest", "RuntimeBindingManifest"]
