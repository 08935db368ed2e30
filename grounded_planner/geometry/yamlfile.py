"""Reading the layer's YAML files (camera info, extrinsics, board specs) with typed errors naming the file."""

from grounded_planner.yamlfile import read_yaml

__all__ = ["read_yaml"]
