"""The resource-neutral reshard contracts: kinds, manifest protocols, identities, fragments."""

from .fragments import RuntimeBindingFragment
from .ids import (LeaseId, ParticipantId, PlacementFragmentId, PlacementId, PlacementSetId, ResourceId, RevisionId,
                  RuntimeFragmentId, RuntimeInstanceId, StoredFragmentId, TensorId, TopologyId)
from .manifest import (PlacementManifest, ResourceKind, ResourceManifest, RuntimeBindingManifest,
                       StoredResourceManifest, validate_resource_binding_identity)

__all__ = ["LeaseId", "ParticipantId", "PlacementFragmentId", "PlacementId", "PlacementManifest", "PlacementSetId",
           "ResourceId", "ResourceKind", "ResourceManifest", "RevisionId", "RuntimeBindingManifest",
           "RuntimeBindingFragment", "RuntimeFragmentId", "RuntimeInstanceId", "StoredFragmentId", "TensorId",
           "TopologyId", "StoredResourceManifest", "validate_resource_binding_identity"]
