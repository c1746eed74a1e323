"""The structural manifest contracts every reusable resource shares."""

from enum import Enum

try:
    from typing import Protocol
except ImportError:  # pragma: no cover - Python < 3.8
    from typing_extensions import Protocol


class ResourceKind(str, Enum):
    """What a manifest describes."""

    MODEL_WEIGHT = "model_weight"
    KV_CACHE = "kv_cache"  # reserved: no manifest yet


class ResourceManifest(Protocol):
    """A typed reusable resource: ``resource_id`` and ``resource_kind``."""

    @property
    def resource_id(self): ...

    @property
    def resource_kind(self): ...


class PlacementManifest(ResourceManifest, Protocol):
    """An address-free logical placement: ``placement_id`` and the ``digest`` that attests it."""

    @property
    def placement_id(self): ...

    @property
    def digest(self): ...


class RuntimeBindingManifest(ResourceManifest, Protocol):
    """Physical locations of one placement, fenced by instance, generation and lease."""

    @property
    def placement_id(self): ...

    @property
    def placement_digest(self): ...

    @property
    def instance_id(self): ...

    @property
    def generation(self): ...

    @property
    def lease_id(self): ...


class StoredResourceManifest(ResourceManifest, Protocol):
    """Persistent metadata of a resource kept in the store."""

    namespace: str
    group_id: str
    manifest_key: str
    created_at: str


def validate_resource_binding_identity(placement, binding):
    """ValueError unless the binding attests exactly this placement (kind, resource, id, digest)."""
    checks = (
        (placement.resource_kind, binding.resource_kind, "placement and runtime binding resource_kind differ"),
        (placement.resource_id, binding.resource_id, "placement and runtime binding resource_id differ"),
        (placement.placement_id, binding.placement_id, "placement_id and runtime binding placement_id differ"),
        (placement.digest, binding.placement_digest,
         "placement digest and runtime binding placement digest differ"),
    )
    for mine, theirs, message in checks:
        if mine != theirs:
            raise ValueError(message)
