"""What the logical planner moves between: placement boxes and stored object ranges (no addresses)."""

from typing import Union

from ..storage_manifest import StoredFragment
from ..types import PlacementFragment

LogicalSourceFragment = Union[PlacementFragment, StoredFragment]
LogicalTargetFragment = PlacementFragment
GeometryFragment = Union[PlacementFragment, StoredFragment]

__all__ = ["GeometryFragment", "LogicalSourceFragment", "LogicalTargetFragment"]
