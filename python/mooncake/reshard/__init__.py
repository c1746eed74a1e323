"""mooncake.reshard: Mooncake's framework-neutral resharding contracts (a first part).

Mooncake's ``mooncake-reshard`` package describes reusable runtime resources (model weights;
KV caches reserved) as typed manifests and plans their N-D resharding. Here:

- ``mooncake.reshard.contracts``: the resource-neutral contracts, ``ResourceKind``, the
  structural ``ResourceManifest``/``PlacementManifest``/``RuntimeBindingManifest``/
  ``StoredResourceManifest`` protocols, the identity types, ``RuntimeBindingFragment`` (one
  contiguous physical view of a logical fragment, checked on construction) and
  ``validate_resource_binding_identity``;
- ``mooncake.reshard.geometry``: N-D logical boxes (``box_contains``, ``boxes_overlap``,
  ``boxes_exactly_cover``, ``regions_exactly_cover``).

Not here: ``mooncake.reshard.weight`` (the model-weight placement manifests, their JSON form
and the logical transfer planner); importing it raises ``ImportError``.
"""

from .contracts import PlacementManifest, ResourceKind, ResourceManifest, RuntimeBindingManifest

__all__ = ["ResourceKind", "ResourceManifest", "PlacementManifest", "RuntimeBindingManifest"]
