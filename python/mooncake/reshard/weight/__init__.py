"""mooncake.reshard.weight: model-weight placement manifests and the logical reshard planner."""

from .manifest import (OwnershipAxis, ParallelRank, ParallelTopology, PlacementFragment, ReplicatedAxis,
                       RuntimeBindingFragment, SplitAxis, TensorDescriptor, TopologyParticipant,
                       WeightPlacementManifest, WeightPlacementPart, WeightRuntimeBindingManifest,
                       validate_runtime_binding, validate_runtime_bindings)
from .serde import weight_placement_from_json, weight_placement_to_json
from .planner import (LogicalTransferOperation, LogicalTransferPlan, PipelineRouteGroup, PlacementExecutorPlan,
                      PlanningLimits, TransferRegion, plan_placement_transfer, plan_placement_transfer_to_local_target,
                      plan_stored_transfer_to_target_placement)
from .storage_manifest import StoredFragment, WeightManifest

__all__ = ["ParallelRank", "ParallelTopology", "PlacementFragment", "WeightPlacementManifest", "WeightPlacementPart",
           "RuntimeBindingFragment", "WeightRuntimeBindingManifest", "SplitAxis", "ReplicatedAxis", "OwnershipAxis",
           "TensorDescriptor", "TopologyParticipant", "validate_runtime_binding", "validate_runtime_bindings",
           "weight_placement_from_json", "weight_placement_to_json", "StoredFragment", "WeightManifest",
           "LogicalTransferPlan", "LogicalTransferOperation", "PipelineRouteGroup", "PlacementExecutorPlan",
           "PlanningLimits", "TransferRegion", "plan_placement_transfer", "plan_placement_transfer_to_local_target",
           "plan_stored_transfer_to_target_placement"]
