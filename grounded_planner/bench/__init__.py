"""GroundedPlanBench-style episodes, scoring (TSR/ARR), batch runner and reports."""
