"""grounded_planner: act on spatially grounded plans from vision-language models."""

__version__ = "0.1.0"
