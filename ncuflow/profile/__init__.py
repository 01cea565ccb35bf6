"""Profiling: the ncu command line, planning, running, sweeps and the pass planner."""
