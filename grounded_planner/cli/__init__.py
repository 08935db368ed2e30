"""The `grounded-planner` command line."""
