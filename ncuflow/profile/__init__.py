"""Profiling: the ncu command line, planning, running, sweeps and the pass planner."""

# Seconds one ncu run may take before it and its children are stopped (replay of a full
# set can take minutes). Here, with no imports, so the command line can show it cheaply.
DEFAULT_TIMEOUT_S = 900.0
